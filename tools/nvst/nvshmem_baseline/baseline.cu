// NVIDIA NVSHMEM as a benchmark baseline: the same put kernel and ping-pong
// as ours, written with nvshmem calls, and NVSHMEM's own stream collectives.
// Built into a plugin so that nvst runs where NVSHMEM is absent.
#include <nvshmem.h>
#include <nvshmemx.h>

#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "baseline_abi.h"

namespace {

__global__ void put_kernel(char* dst, const char* src, size_t bytes, int pe) {
  const size_t per = ((bytes + gridDim.x - 1) / gridDim.x + 15) / 16 * 16;
  const size_t off = per * blockIdx.x;
  if (off < bytes) {
    const size_t len = bytes - off < per ? bytes - off : per;
    nvshmemx_putmem_nbi_block(dst + off, src + off, len, pe);
  }
  __syncthreads();
  if (threadIdx.x == 0) nvshmem_quiet();
}

__global__ void pingpong_kernel(uint64_t* flag, int me, int peer, int iters) {
  for (int i = 1; i <= iters; ++i) {
    if (me == 0) {
      nvshmem_uint64_p(flag, static_cast<uint64_t>(i), peer);
      nvshmem_uint64_wait_until(flag, NVSHMEM_CMP_EQ, static_cast<uint64_t>(i));
    } else {
      nvshmem_uint64_wait_until(flag, NVSHMEM_CMP_EQ, static_cast<uint64_t>(i));
      nvshmem_uint64_p(flag, static_cast<uint64_t>(i), peer);
    }
  }
}

char g_version[64];
bool g_initialized = false;
bool g_finalized = false;
// NVSHMEM_REDUCE_SCRATCH_SIZE as NVSHMEM reads it at init; 512 KiB is its default.
size_t g_reduce_scratch = size_t{1} << 19;

// Writes a printf-style message into the caller's err and returns 1.
__attribute__((format(printf, 3, 4))) int fail(char* err, size_t errlen, const char* fmt, ...) {
  if (err && errlen > 0) {
    va_list args;
    va_start(args, fmt);
    std::vsnprintf(err, errlen, fmt, args);
    va_end(args);
  }
  return 1;
}

// NVSHMEM's size syntax (NVSHMEM_SYMMETRIC_SIZE and the like): a number and
// an optional k, m, g or t (powers of 1024); what follows is ignored, as
// NVSHMEM does. 0 when it does not parse.
size_t parse_nvshmem_size(const char* text) {
  if (!text || !*text) return 0;
  char* end = nullptr;
  const double value = std::strtod(text, &end);
  if (end == text || !(value > 0)) return 0;
  double scale = 1;
  switch (*end) {
    case 'k':
    case 'K': scale = 1024.0; break;
    case 'm':
    case 'M': scale = 1024.0 * 1024; break;
    case 'g':
    case 'G': scale = 1024.0 * 1024 * 1024; break;
    case 't':
    case 'T': scale = 1024.0 * 1024 * 1024 * 1024; break;
    default: break;
  }
  return static_cast<size_t>(std::ceil(value * scale));
}

size_t dtype_bytes(int dtype) {
  switch (dtype) {
    case NVSTB_F32:
    case NVSTB_I32: return 4;
    case NVSTB_BF16:
    case NVSTB_F16: return 2;
    case NVSTB_I64: return 8;
    default: return 0;
  }
}

bool is_reduction(int coll) { return coll == NVSTB_ALL_REDUCE || coll == NVSTB_REDUCE_SCATTER; }

// NVSHMEM names its collectives by element type and, for reductions, by
// operation: one dispatcher per type, each call remembering the name it
// made for the error message.
#define NVSTB_CALL(fn) (*called = #fn, fn(NVSHMEM_TEAM_WORLD, d, s, count, stream))
#define NVSTB_DEFINE_DISPATCH(NAME, T) \
  int dispatch_##NAME(int coll, int op, void* dst, const void* src, size_t count, cudaStream_t stream, \
                      const char** called) { \
    T* d = static_cast<T*>(dst); \
    const T* s = static_cast<const T*>(src); \
    switch (coll) { \
      case NVSTB_ALL_REDUCE: \
        if (op == NVSTB_MAX) return NVSTB_CALL(nvshmemx_##NAME##_max_reduce_on_stream); \
        if (op == NVSTB_MIN) return NVSTB_CALL(nvshmemx_##NAME##_min_reduce_on_stream); \
        return NVSTB_CALL(nvshmemx_##NAME##_sum_reduce_on_stream); \
      case NVSTB_REDUCE_SCATTER: \
        if (op == NVSTB_MAX) return NVSTB_CALL(nvshmemx_##NAME##_max_reducescatter_on_stream); \
        if (op == NVSTB_MIN) return NVSTB_CALL(nvshmemx_##NAME##_min_reducescatter_on_stream); \
        return NVSTB_CALL(nvshmemx_##NAME##_sum_reducescatter_on_stream); \
      case NVSTB_ALL_GATHER: return NVSTB_CALL(nvshmemx_##NAME##_fcollect_on_stream); \
      case NVSTB_ALL_TO_ALL: return NVSTB_CALL(nvshmemx_##NAME##_alltoall_on_stream); \
      default: return -1; \
    } \
  }
NVSTB_DEFINE_DISPATCH(float, float)
NVSTB_DEFINE_DISPATCH(bfloat16, __nv_bfloat16)
NVSTB_DEFINE_DISPATCH(half, half)
NVSTB_DEFINE_DISPATCH(int32, int32_t)
NVSTB_DEFINE_DISPATCH(int64, int64_t)
#undef NVSTB_DEFINE_DISPATCH
#undef NVSTB_CALL

int dispatch(int coll, int dtype, int op, void* dst, const void* src, size_t count, cudaStream_t stream,
             const char** called) {
  switch (dtype) {
    case NVSTB_F32: return dispatch_float(coll, op, dst, src, count, stream, called);
    case NVSTB_BF16: return dispatch_bfloat16(coll, op, dst, src, count, stream, called);
    case NVSTB_F16: return dispatch_half(coll, op, dst, src, count, stream, called);
    case NVSTB_I32: return dispatch_int32(coll, op, dst, src, count, stream, called);
    case NVSTB_I64: return dispatch_int64(coll, op, dst, src, count, stream, called);
    default: return -1;
  }
}

// Refuses what NVSHMEM would take badly (it asserts, overflows its scratch or
// reads memory outside its heap rather than return an error): 0 when the
// call may go ahead.
int check_collective(int coll, int dtype, int op, void* dst, const void* src, size_t count, char* err, size_t errlen) {
  if (coll < NVSTB_ALL_REDUCE || coll > NVSTB_ALL_TO_ALL) return fail(err, errlen, "unknown collective %d", coll);
  const size_t elem = dtype_bytes(dtype);
  if (elem == 0) return fail(err, errlen, "unknown dtype %d", dtype);
  if (is_reduction(coll) && (op < NVSTB_SUM || op > NVSTB_MIN)) return fail(err, errlen, "unknown reduction %d", op);
  if (!dst || !src || count == 0) return fail(err, errlen, "null buffer or zero count");
  const int me = nvshmem_my_pe();
  if (!nvshmem_ptr(dst, me) || !nvshmem_ptr(src, me))
    return fail(err, errlen, "src and dst must be in NVSHMEM's symmetric heap (nvstb_malloc)");
  const size_t parts =
      coll == NVSTB_REDUCE_SCATTER || coll == NVSTB_ALL_TO_ALL ? static_cast<size_t>(nvshmem_n_pes()) : 1;
  if (count > SIZE_MAX / elem / parts) return fail(err, errlen, "count %zu overflows", count);
  size_t max_bytes = SIZE_MAX;
  if (nvstb_coll_max_bytes(coll, &max_bytes, err, errlen) != 0) return 1;
  if (count * elem * parts > max_bytes)
    return fail(err, errlen,
                "a %zu-byte source exceeds NVSHMEM's reducescatter scratch (%zu bytes: "
                "NVSHMEM_REDUCE_SCRATCH_SIZE / 2)",
                count * elem * parts, max_bytes);
  return 0;
}

}  // namespace

extern "C" int nvstb_init(int rank, int nranks, nvstb_broadcast_fn bcast, char* err, size_t errlen) {
  // Once per process: NVSHMEM cannot start again after nvshmem_finalize.
  if (g_finalized) return fail(err, errlen, "NVSHMEM was finalized in this process");
  if (g_initialized) return 0;
  if (!bcast || nranks < 1 || rank < 0 || rank >= nranks)
    return fail(err, errlen, "bad arguments: rank %d of %d, broadcast %s", rank, nranks, bcast ? "set" : "null");
  // NVLink multicast (NVLS) stays off whatever the environment says: on the
  // shared GPU hosts a multicast object can take the GPUs out of service
  // (README). Overwriting is deliberate: this is a rule, not a default.
  setenv("NVSHMEM_DISABLE_NVLS", "1", 1);
  // NVSHMEM hands its stream collectives to NCCL when it finds libnccl
  // (nvst loads it): the NVSHMEM column of `nvst bench coll` would measure
  // NCCL twice. Off unless the caller asks for it.
  setenv("NVSHMEM_DISABLE_NCCL", "1", 0);
  setenv("NVSHMEM_REMOTE_TRANSPORT", "none", 0);
  setenv("NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME", "lo", 0);
  if (const size_t scratch = parse_nvshmem_size(std::getenv("NVSHMEM_REDUCE_SCRATCH_SIZE"))) g_reduce_scratch = scratch;
  nvshmemx_uniqueid_t uid = NVSHMEMX_UNIQUEID_INITIALIZER;
  if (rank == 0 && nvshmemx_get_uniqueid(&uid) != 0) return fail(err, errlen, "nvshmemx_get_uniqueid failed");
  bcast(&uid, sizeof(uid), 0);
  nvshmemx_init_attr_t attr = NVSHMEMX_INIT_ATTR_INITIALIZER;
  if (nvshmemx_set_attr_uniqueid_args(rank, nranks, &uid, &attr) != 0 ||
      nvshmemx_init_attr(NVSHMEMX_INIT_WITH_UNIQUEID, &attr) != 0)
    return fail(err, errlen, "nvshmemx_init_attr(UNIQUEID) failed (NVSHMEM_DEBUG=WARN says why)");
  // nvshmem_info_get_version() reports the OpenSHMEM spec level (1.3); the
  // library's own release is the vendor version.
  int major = 0, minor = 0, patch = 0;
  nvshmemx_vendor_get_version_info(&major, &minor, &patch);
  std::snprintf(g_version, sizeof(g_version), "%d.%d.%d", major, minor, patch);
  g_initialized = true;
  return 0;
}

extern "C" void* nvstb_malloc(size_t bytes) { return nvshmem_malloc(bytes); }
extern "C" void nvstb_free(void* p) { nvshmem_free(p); }

extern "C" int nvstb_put(void* dst, const void* src, size_t bytes, int pe, int blocks, int threads,
                         cudaStream_t stream) {
  put_kernel<<<blocks, threads, 0, stream>>>(static_cast<char*>(dst), static_cast<const char*>(src), bytes, pe);
  return static_cast<int>(cudaGetLastError());
}

extern "C" int nvstb_pingpong(uint64_t* flag, int me, int peer, int iters, cudaStream_t stream) {
  pingpong_kernel<<<1, 1, 0, stream>>>(flag, me, peer, iters);
  return static_cast<int>(cudaGetLastError());
}

extern "C" void nvstb_barrier_all(void) { nvshmem_barrier_all(); }

extern "C" int nvstb_coll_supported(char* err, size_t errlen) {
  if (!g_initialized || g_finalized) return fail(err, errlen, "NVSHMEM is not initialized (nvstb_init)");
  const int status = nvshmemx_init_status();
  if (status == NVSHMEM_STATUS_LIMITED_MPG)
    return fail(err, errlen,
                "several PEs share a GPU without MPS (NVSHMEM's limited MPG mode), where NVSHMEM's "
                "collectives exit the process");
  // Bootstrapped only: NVSHMEM found no CUDA context at init and defers its
  // device set-up (and the MPG check) to the first call.
  if (status != NVSHMEM_STATUS_IS_INITIALIZED && status != NVSHMEM_STATUS_FULL_MPG)
    return fail(err, errlen, "NVSHMEM's device state is not set up (init status %d)", status);
  return 0;
}

extern "C" int nvstb_coll_max_bytes(int coll, size_t* max_bytes, char* err, size_t errlen) {
  if (!max_bytes) return fail(err, errlen, "max_bytes is null");
  if (coll < NVSTB_ALL_REDUCE || coll > NVSTB_ALL_TO_ALL) return fail(err, errlen, "unknown collective %d", coll);
  // Without NVLS, NVSHMEM's reducescatter pushes every PE's whole source
  // into the team's scratch before reducing, and asserts when it does not
  // fit. Its all_reduce goes through the scratch in segments: no limit.
  *max_bytes = coll == NVSTB_REDUCE_SCATTER ? g_reduce_scratch / 2 : SIZE_MAX;
  return 0;
}

extern "C" int nvstb_collective(int coll, int dtype, int op, void* dst, const void* src, size_t count,
                                cudaStream_t stream, char* err, size_t errlen) {
  if (nvstb_coll_supported(err, errlen) != 0) return 1;
  if (check_collective(coll, dtype, op, dst, src, count, err, errlen) != 0) return 1;
  // NVSHMEM checks its own launches (and exits on a failed one): it links
  // its own CUDA runtime, so cudaGetLastError here would not see them. A
  // kernel fault shows at the caller's next synchronisation.
  const char* called = "?";
  const int rc = dispatch(coll, dtype, op, dst, src, count, stream, &called);
  if (rc != 0) return fail(err, errlen, "%s returned %d", called, rc);
  return 0;
}

extern "C" void nvstb_finalize(void) {
  if (!g_initialized || g_finalized) return;
  nvshmem_finalize();
  g_finalized = true;
}
extern "C" const char* nvstb_version(void) { return g_version; }
