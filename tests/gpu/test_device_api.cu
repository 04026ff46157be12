// GPU tests of the device API and the host API's GPU half, on 2 or more PEs
// (one process per GPU, spawned by this binary). Every case uses random
// sizes, offsets and data, poisons its destination first, and checks every
// byte on the CPU (or, for signal ordering, inside the receiving kernel).
//   nvst_gpu_tests --np N [--seed S] [--rounds R]   device/host API cases
//   nvst_gpu_tests --np 2 --mode errors             device-side failures
//   nvst_gpu_tests --np N --mode atomics            the remote atomics case alone
// Exits 77 (ctest: skipped) when fewer than N GPUs are visible.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "nvst/device.cuh"
#include "gpu_job.hpp"
#include "nvst/launch.hpp"
#include "nvst/nvst.hpp"

namespace dev = nvst::dev;
using dev::Cmp;
using dev::Scope;
using dev::SignalOp;

namespace {

constexpr std::size_t kBuf = (4u << 20) + 4096;  // symmetric buffer bytes
std::uint64_t g_seed = 1;
int g_rounds = 3;
int g_barrier_iters = 1000;

// ---- checking -------------------------------------------------------------

struct Suite {
  int passed = 0, failed = 0;
  void check(const std::string& name, long long local_errors, const std::string& detail = "") {
    auto all = nvst::bootstrap_allgather(&local_errors, sizeof(local_errors));
    std::string bad;
    for (int p = 0; p < nvst::n_pes(); ++p) {
      long long e;
      std::memcpy(&e, all.data() + p * sizeof(e), sizeof(e));
      if (e) bad += " PE" + std::to_string(p) + ":" + std::to_string(e);
    }
    if (bad.empty())
      ++passed;
    else
      ++failed;
    if (nvst::my_pe() == 0) {
      if (bad.empty())
        std::printf("PASS %s\n", name.c_str());
      else
        std::printf("FAIL %s: errors%s %s\n", name.c_str(), bad.c_str(), detail.c_str());
      std::fflush(stdout);
    }
  }
};

std::vector<std::uint8_t> random_bytes(std::uint64_t seed, std::size_t n) {
  std::mt19937_64 rng(seed);
  std::vector<std::uint8_t> v(n);
  for (auto& b : v) b = static_cast<std::uint8_t>(rng() | 1);  // never zero
  return v;
}

// Byte pattern computable on the device (PE, index).
__host__ __device__ inline std::uint8_t pat(std::uint64_t seed, int pe, std::size_t i) {
  std::uint64_t x = seed * 0x9e3779b97f4a7c15ull + static_cast<std::uint64_t>(pe) * 0xbf58476d1ce4e5b9ull + i;
  x ^= x >> 31;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 29;
  return static_cast<std::uint8_t>(x | 1);
}

__global__ void fill_pat(std::uint8_t* p, std::size_t n, std::uint64_t seed, int pe) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    p[i] = pat(seed, pe, i);
}

// ---- bulk put/get at every scope ------------------------------------------

enum class Op { kPut, kPutNbi, kGet, kGetNbi, kPutTyped, kPutTma };

template <Scope S>
__device__ void do_op(Op op, char* dst, const char* src, std::size_t n, int pe) {
  switch (op) {
    case Op::kPut:
      if constexpr (S == Scope::kThread)
        dev::putmem(dst, src, n, pe);
      else if constexpr (S == Scope::kWarp)
        dev::putmem_warp(dst, src, n, pe);
      else
        dev::putmem_block(dst, src, n, pe);
      break;
    case Op::kPutNbi:
      if constexpr (S == Scope::kThread)
        dev::putmem_nbi(dst, src, n, pe);
      else if constexpr (S == Scope::kWarp)
        dev::putmem_nbi_warp(dst, src, n, pe);
      else
        dev::putmem_nbi_block(dst, src, n, pe);
      dev::quiet();
      break;
    case Op::kGet:
      if constexpr (S == Scope::kThread)
        dev::getmem(dst, src, n, pe);
      else if constexpr (S == Scope::kWarp)
        dev::getmem_warp(dst, src, n, pe);
      else
        dev::getmem_block(dst, src, n, pe);
      break;
    case Op::kGetNbi:
      if constexpr (S == Scope::kThread)
        dev::getmem_nbi(dst, src, n, pe);
      else if constexpr (S == Scope::kWarp)
        dev::getmem_nbi_warp(dst, src, n, pe);
      else
        dev::getmem_nbi_block(dst, src, n, pe);
      dev::quiet();
      break;
    case Op::kPutTyped:  // whole bytes as uint8 elements through the typed API
      if constexpr (S == Scope::kThread)
        dev::put(dst, src, n, pe);
      else if constexpr (S == Scope::kWarp)
        dev::put_warp(dst, src, n, pe);
      else
        dev::put_block(dst, src, n, pe);
      break;
    case Op::kPutTma:
      if constexpr (S == Scope::kBlock) dev::putmem_nbi_block_tma(dst, src, n, pe);
      dev::quiet();
      break;
  }
}

// Workers (threads, warps or blocks) split [0, n) into contiguous chunks.
template <Scope S>
__global__ void rma_kernel(Op op, char* dst, const char* src, std::size_t n, int pe) {
  unsigned worker, workers;
  if constexpr (S == Scope::kThread) {
    worker = blockIdx.x * blockDim.x + threadIdx.x;
    workers = gridDim.x * blockDim.x;
  } else if constexpr (S == Scope::kWarp) {
    worker = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
    workers = gridDim.x * blockDim.x / 32;
  } else {
    worker = blockIdx.x;
    workers = gridDim.x;
  }
  const std::size_t per = (n + workers - 1) / workers;
  const std::size_t begin = per * worker;
  const std::size_t len = begin >= n ? 0 : (n - begin < per ? n - begin : per);
  do_op<S>(op, dst + begin, src + begin, len, pe);
}

const char* op_name(Op op) {
  switch (op) {
    case Op::kPut: return "putmem";
    case Op::kPutNbi: return "putmem_nbi+quiet";
    case Op::kGet: return "getmem";
    case Op::kGetNbi: return "getmem_nbi+quiet";
    case Op::kPutTyped: return "put<uint8>";
    case Op::kPutTma: return "putmem_nbi_block_tma+quiet";
  }
  return "?";
}

long long check_region(const std::vector<std::uint8_t>& got, std::size_t off, const std::uint8_t* want, std::size_t n) {
  long long bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (i >= off && i < off + n)
      bad += got[i] != want[i - off];
    else
      bad += got[i] != 0xA5;  // nothing outside the target range changed
  }
  return bad;
}

template <Scope S>
void rma_case(Suite& suite, Op op, const char* scope_name, char* sym_src, char* sym_dst, int target_shift) {
  const int me = nvst::my_pe(), n = nvst::n_pes();
  long long errors = 0;
  std::string detail;
  for (int round = 0; round < g_rounds; ++round) {
    std::mt19937_64 rng(g_seed * 1000003 + static_cast<std::uint64_t>(round) * 7919 + static_cast<int>(op) * 31 +
                        static_cast<int>(S));
    const std::size_t sizes[] = {0, 1, 2, 3, 15, 16, 17, 255, 4097, 65536 + 3, rng() % (3u << 20) + 1};
    const std::size_t size = sizes[rng() % (sizeof(sizes) / sizeof(sizes[0]))];
    const std::size_t so = rng() % 64, doff = rng() % 64;
    const int target = (me + target_shift) % n;
    const std::uint64_t data_seed =
        g_seed ^ (static_cast<std::uint64_t>(round) << 20) ^ (static_cast<std::uint64_t>(op) << 40);
    auto src_host = random_bytes(data_seed + static_cast<std::uint64_t>(me), kBuf);
    NVST_CHECK_CUDA(cudaMemcpy(sym_src, src_host.data(), kBuf, cudaMemcpyHostToDevice));
    NVST_CHECK_CUDA(cudaMemset(sym_dst, 0xA5, kBuf));
    NVST_CHECK_CUDA(cudaDeviceSynchronize());
    nvst::barrier_all();
    const bool is_get = op == Op::kGet || op == Op::kGetNbi;
    const int blocks = 1 + static_cast<int>(rng() % 3);
    const int threads = S == Scope::kThread ? 1 + static_cast<int>(rng() % 64) : 32 * (1 + static_cast<int>(rng() % 8));
    rma_kernel<S><<<blocks, threads>>>(op, sym_dst + doff, sym_src + so, size, target);
    NVST_CHECK_LAUNCH();
    NVST_CHECK_CUDA(cudaDeviceSynchronize());
    nvst::barrier_all();
    std::vector<std::uint8_t> got(kBuf);
    NVST_CHECK_CUDA(cudaMemcpy(got.data(), sym_dst, kBuf, cudaMemcpyDeviceToHost));
    // put: my dst holds the src of the PE that targets me; get: my dst holds my target's src.
    const int from = is_get ? target : (me - target_shift % n + n) % n;
    auto want = random_bytes(data_seed + static_cast<std::uint64_t>(from), kBuf);
    long long e = check_region(got, doff, want.data() + so, size);
    if (e && detail.empty())
      detail = "(round " + std::to_string(round) + ", " + std::to_string(size) + " bytes, src+" + std::to_string(so) +
               " dst+" + std::to_string(doff) + ", " + std::to_string(blocks) + "x" + std::to_string(threads) + ")";
    errors += e;
  }
  suite.check(std::string(op_name(op)) + " " + scope_name + (target_shift ? " -> next PE" : " -> self"), errors,
              detail);
}

// A put whose source is stream-ordered memory (cudaMallocAsync) and whose
// cudaFreeAsync the host issues right after the launch, as stream-ordered
// code does. The kernel reads the source itself, on one node and across
// nodes (it stages its pieces itself, stage.cuh), before the stream reaches
// the free: legal. When the proxy copied it instead, after the host had
// freed it, the driver no longer knew the pointer (a default copy crashed).
void stream_ordered_source_case(Suite& suite, char* sym_dst) {
  const int me = nvst::my_pe(), n = nvst::n_pes(), target = (me + 1) % n;
  long long errors = 0;
  cudaStream_t s;
  NVST_CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (std::size_t size : {std::size_t{4}, std::size_t{4097}, std::size_t{(1u << 20) + 3}}) {
    const std::uint64_t data_seed = g_seed * 31 + size;
    auto src_host = random_bytes(data_seed + static_cast<std::uint64_t>(me), size);
    NVST_CHECK_CUDA(cudaMemset(sym_dst, 0xA5, kBuf));
    NVST_CHECK_CUDA(cudaDeviceSynchronize());
    nvst::barrier_all();
    char* src = nullptr;
    NVST_CHECK_CUDA(cudaMallocAsync(reinterpret_cast<void**>(&src), size, s));
    NVST_CHECK_CUDA(cudaMemcpyAsync(src, src_host.data(), size, cudaMemcpyHostToDevice, s));
    rma_kernel<Scope::kBlock><<<2, 128, 0, s>>>(Op::kPutNbi, sym_dst, src, size, target);
    NVST_CHECK_LAUNCH();
    NVST_CHECK_CUDA(cudaFreeAsync(src, s));
    NVST_CHECK_CUDA(cudaStreamSynchronize(s));
    nvst::barrier_all();
    std::vector<std::uint8_t> got(kBuf);
    NVST_CHECK_CUDA(cudaMemcpy(got.data(), sym_dst, kBuf, cudaMemcpyDeviceToHost));
    auto want = random_bytes(data_seed + static_cast<std::uint64_t>((me - 1 + n) % n), size);
    errors += check_region(got, 0, want.data(), size);
  }
  NVST_CHECK_CUDA(cudaStreamDestroy(s));
  suite.check("putmem_nbi_block from stream-ordered memory freed after the launch", errors);
}

// Every PE's setup done, launch() (a kernel), and every PE's kernel done.
template <typename Launch>
void launch_between_barriers(Launch launch) {
  NVST_CHECK_CUDA(cudaDeviceSynchronize());
  nvst::barrier_all();
  launch();
  NVST_CHECK_LAUNCH();
  NVST_CHECK_CUDA(cudaDeviceSynchronize());
  nvst::barrier_all();
}

// A signal case's run: src filled with pat(seed, this PE), the destination
// poisoned, the signal word and the count of bad bytes zeroed; then
// launch() between barriers. Returns the bytes the receiver found wrong at
// their signal and the final signal.
template <typename Launch>
std::pair<unsigned long long, std::uint64_t> run_signal_kernel(char* src, char* sym_dst, std::uint64_t* sig,
                                                               unsigned long long* bad, std::uint64_t seed,
                                                               Launch launch) {
  fill_pat<<<132, 256>>>(reinterpret_cast<std::uint8_t*>(src), kBuf, seed, nvst::my_pe());
  NVST_CHECK_LAUNCH();
  NVST_CHECK_CUDA(cudaMemset(sym_dst, 0xA5, kBuf));
  NVST_CHECK_CUDA(cudaMemset(sig, 0, sizeof(*sig)));
  NVST_CHECK_CUDA(cudaMemset(bad, 0, sizeof(*bad)));
  launch_between_barriers(launch);
  unsigned long long b = 0;
  std::uint64_t s = 0;
  NVST_CHECK_CUDA(cudaMemcpy(&b, bad, sizeof(b), cudaMemcpyDeviceToHost));
  NVST_CHECK_CUDA(cudaMemcpy(&s, sig, sizeof(s), cudaMemcpyDeviceToHost));
  return {b, s};
}

// ---- puts that their producers stage (other nodes) -------------------------
// Across nodes a put's group copies its data into the proxy's staging ring
// itself, in pieces of 256 KiB (include/nvst/device/stage.cuh); on one node
// the same calls are plain stores. Sizes around a piece's edges, sources of
// every alignment in and outside the heap, and more producers than slots.

constexpr int kStagedCount = 6;
__host__ __device__ inline std::size_t staged_size(int k) {
  constexpr std::size_t kPiece = std::size_t{256} << 10;
  switch (k) {
    case 0: return 1;
    case 1: return 15;
    case 2: return 4096 + 3;
    case 3: return kPiece;
    case 4: return kPiece + 1;
    default: return (std::size_t{3} << 20) + 5;
  }
}

// A put case's run: src (GPU memory) gets the random bytes of data_seed +
// this PE and the destination is poisoned; then launch() between barriers,
// which puts `size` bytes from src + so to sym_dst + doff on the next PE.
// Returns the bytes of this PE's destination that differ from what the PE
// before it sent, or that changed outside the put.
template <typename Launch>
long long run_put_kernel(char* src, char* sym_dst, std::uint64_t data_seed, std::size_t so, std::size_t doff,
                         std::size_t size, Launch launch) {
  const int me = nvst::my_pe(), n = nvst::n_pes();
  const auto src_host = random_bytes(data_seed + static_cast<std::uint64_t>(me), kBuf);
  NVST_CHECK_CUDA(cudaMemcpy(src, src_host.data(), kBuf, cudaMemcpyHostToDevice));
  NVST_CHECK_CUDA(cudaMemset(sym_dst, 0xA5, kBuf));
  launch_between_barriers(launch);
  std::vector<std::uint8_t> got(kBuf);
  NVST_CHECK_CUDA(cudaMemcpy(got.data(), sym_dst, kBuf, cudaMemcpyDeviceToHost));
  const auto want = random_bytes(data_seed + static_cast<std::uint64_t>((me + n - 1) % n), kBuf);
  return check_region(got, doff, want.data() + so, size);
}

// One group (a thread, a warp or a block) puts all of [0, n); `quiet`
// follows an _nbi put with a quiet, the blocking form has its own.
template <Scope S>
__global__ void one_group_put_kernel(char* dst, const char* src, std::size_t n, int pe, bool nbi) {
  if (S == Scope::kThread && threadIdx.x != 0) return;
  if (S == Scope::kWarp && threadIdx.x >= 32) return;
  do_op<S>(nbi ? Op::kPutNbi : Op::kPut, dst, src, n, pe);
}

// The source: the heap (sym_src) or a cudaMalloc'd buffer outside it, both
// holding the same random bytes.
template <Scope S>
void staged_put_case(Suite& suite, const char* scope_name, char* sym_src, char* sym_dst, char* outside) {
  const int target = (nvst::my_pe() + 1) % nvst::n_pes();
  long long errors = 0;
  std::string detail;
  int k = 0;
  for (int z = 0; z < kStagedCount; ++z) {
    const std::size_t size = staged_size(z);
    for (const bool in_heap : {true, false}) {
      ++k;
      std::mt19937_64 rng(g_seed * 7727 + static_cast<std::uint64_t>(k) * 131 + static_cast<int>(S));
      const std::size_t so = rng() % 64, doff = rng() % 64;
      const std::uint64_t data_seed = g_seed * 3 + static_cast<std::uint64_t>(k) * 1000 + static_cast<int>(S) * 100000;
      char* src = in_heap ? sym_src : outside;
      const bool nbi = k % 2 == 0;
      const long long e = run_put_kernel(src, sym_dst, data_seed, so, doff, size, [&] {
        one_group_put_kernel<S><<<1, S == Scope::kBlock ? 256 : 32>>>(sym_dst + doff, src + so, size, target, nbi);
      });
      if (e && detail.empty())
        detail = "(" + std::to_string(size) + " bytes from " + (in_heap ? "the heap" : "cudaMalloc") + " +" +
                 std::to_string(so) + ", dst +" + std::to_string(doff) + ", " + std::to_string(e) + " bytes wrong)";
      errors += e;
    }
  }
  suite.check(std::string("one ") + scope_name + "'s putmem[_nbi] of 1 B .. 3 MiB+5, heap and cudaMalloc sources",
              errors, detail);
}

// More producers than the staging ring has slots (32): every thread, warp
// or block of a large grid puts its own chunk of one 3 MiB+5 region at once.
template <Scope S>
void many_producers_case(Suite& suite, const char* scope_name, char* sym_src, char* sym_dst, char* outside) {
  const int target = (nvst::my_pe() + 1) % nvst::n_pes();
  const std::size_t size = (3u << 20) + 5, so = 7, doff = 3;
  const std::uint64_t data_seed = g_seed * 5 + 77 + static_cast<int>(S);
  // 96 blocks of 128 threads; 64 warps (8 x 256); 128 threads (2 x 64).
  const int blocks = S == Scope::kBlock ? 96 : S == Scope::kWarp ? 8 : 2;
  const int threads = S == Scope::kBlock ? 128 : S == Scope::kWarp ? 256 : 64;
  long long errors = 0;
  for (const bool in_heap : {true, false}) {
    char* src = in_heap ? sym_src : outside;
    const Op op = in_heap ? Op::kPutNbi : Op::kPut;
    errors += run_put_kernel(src, sym_dst, data_seed, so, doff, size,
                             [&] { rma_kernel<S><<<blocks, threads>>>(op, sym_dst + doff, src + so, size, target); });
  }
  suite.check(std::string("3 MiB+5 put by more ") + scope_name + " producers than staging slots", errors);
}

// put_signal of every staged size, one after the other from one group:
// block 0 sends (signal ADD 1 each), block 1 of the target checks each
// message as soon as its signal says it is there. The sizes' sum fits kBuf.
template <Scope S>
__global__ void staged_signal_kernel(char* dst, const char* src, std::uint64_t* sig, bool nbi, int next, int prev,
                                     std::uint64_t seed, unsigned long long* bad) {
  if (blockIdx.x == 0) {
    if (S == Scope::kThread && threadIdx.x != 0) return;
    if (S == Scope::kWarp && threadIdx.x >= 32) return;
    std::size_t off = 0;
    for (int k = 0; k < kStagedCount; ++k) {
      off += static_cast<std::size_t>(k) + 1;  // a new alignment each time
      const std::size_t len = staged_size(k);
      if constexpr (S == Scope::kThread) {
        if (nbi)
          dev::putmem_signal_nbi(dst + off, src + off, len, sig, 1, SignalOp::kAdd, next);
        else
          dev::putmem_signal(dst + off, src + off, len, sig, 1, SignalOp::kAdd, next);
      } else if constexpr (S == Scope::kWarp) {
        if (nbi)
          dev::putmem_signal_nbi_warp(dst + off, src + off, len, sig, 1, SignalOp::kAdd, next);
        else
          dev::putmem_signal_warp(dst + off, src + off, len, sig, 1, SignalOp::kAdd, next);
      } else {
        if (nbi)
          dev::putmem_signal_nbi_block(dst + off, src + off, len, sig, 1, SignalOp::kAdd, next);
        else
          dev::putmem_signal_block(dst + off, src + off, len, sig, 1, SignalOp::kAdd, next);
      }
      off += len;
    }
    return;
  }
  __shared__ unsigned long long block_bad;
  if (threadIdx.x == 0) block_bad = 0;
  __syncthreads();
  std::size_t off = 0;
  for (int k = 0; k < kStagedCount; ++k) {
    off += static_cast<std::size_t>(k) + 1;
    if (threadIdx.x == 0) dev::signal_wait_until(sig, Cmp::kGe, static_cast<std::uint64_t>(k + 1));
    __syncthreads();
    unsigned long long mine = 0;
    for (std::size_t i = threadIdx.x; i < staged_size(k); i += blockDim.x)
      mine += static_cast<std::uint8_t>(dst[off + i]) != pat(seed, prev, off + i);
    if (mine) atomicAdd(&block_bad, mine);
    off += staged_size(k);
    __syncthreads();
  }
  if (threadIdx.x == 0) *bad = block_bad;
}

template <Scope S>
void staged_signal_case(Suite& suite, const char* scope_name, char* sym_src, char* sym_dst, char* outside,
                        std::uint64_t* sig, unsigned long long* bad) {
  const int me = nvst::my_pe(), n = nvst::n_pes();
  long long errors = 0;
  std::string detail;
  for (const bool nbi : {false, true}) {
    const bool in_heap = nbi;  // the blocking form from cudaMalloc, _nbi from the heap
    const std::uint64_t seed = g_seed * 11 + static_cast<std::uint64_t>(S) * 3 + (nbi ? 1 : 0);
    char* src = in_heap ? sym_src : outside;
    const auto [b, s] = run_signal_kernel(src, sym_dst, sig, bad, seed, [&] {
      staged_signal_kernel<S><<<2, 256>>>(sym_dst, src, sig, nbi, (me + 1) % n, (me + n - 1) % n, seed, bad);
    });
    const long long e = static_cast<long long>(b) + (s != static_cast<std::uint64_t>(kStagedCount));
    if (e && detail.empty())
      detail = std::string(nbi ? "_nbi" : "blocking") + ": " + std::to_string(b) +
               " bytes wrong at their signal, final signal " + std::to_string(s);
    errors += e;
  }
  suite.check(std::string("putmem_signal[_nbi] ") + scope_name + " of 1 B .. 3 MiB+5 (data checked at signal)", errors,
              detail);
}

// The host API's puts to another node on GPU heaps: a GPU source (heap or
// cudaMalloc) is staged by the calling thread, a host one (pageable or
// pinned) copied by the proxy; then a put_signal of each kind.
void host_staged_put_case(Suite& suite, char* sym_src, char* sym_dst, char* outside, std::uint64_t* sig) {
  const int me = nvst::my_pe(), n = nvst::n_pes(), target = (me + 1) % n, from = (me + n - 1) % n;
  char* pinned = nullptr;
  NVST_CHECK_CUDA(cudaMallocHost(reinterpret_cast<void**>(&pinned), kBuf));
  std::vector<char> pageable(kBuf);
  const char* kinds[] = {"heap", "cudaMalloc", "pageable", "pinned"};
  long long errors = 0;
  std::string detail;
  int k = 0;
  for (int z = 0; z < kStagedCount; ++z) {
    const std::size_t size = staged_size(z);
    for (int kind = 0; kind < 4; ++kind) {
      ++k;
      const std::size_t so = static_cast<std::size_t>(k * 5) % 64, doff = static_cast<std::size_t>(k * 3) % 64;
      const std::uint64_t data_seed = g_seed * 13 + static_cast<std::uint64_t>(k) * 1000;
      const auto src_host = random_bytes(data_seed + static_cast<std::uint64_t>(me), kBuf);
      char* src = kind == 0 ? sym_src : kind == 1 ? outside : kind == 2 ? pageable.data() : pinned;
      if (kind < 2)
        NVST_CHECK_CUDA(cudaMemcpy(src, src_host.data(), kBuf, cudaMemcpyHostToDevice));
      else
        std::memcpy(src, src_host.data(), kBuf);
      NVST_CHECK_CUDA(cudaMemset(sym_dst, 0xA5, kBuf));
      NVST_CHECK_CUDA(cudaMemset(sig, 0, sizeof(*sig)));
      NVST_CHECK_CUDA(cudaDeviceSynchronize());
      nvst::barrier_all();
      if (k % 2)
        nvst::putmem(sym_dst + doff, src + so, size, target);
      else
        nvst::putmem_signal_nbi(sym_dst + doff, src + so, size, sig, 5, nvst::SignalOp::kSet, target);
      nvst::quiet();
      nvst::barrier_all();
      std::vector<std::uint8_t> got(kBuf);
      std::uint64_t s = 0;
      NVST_CHECK_CUDA(cudaMemcpy(got.data(), sym_dst, kBuf, cudaMemcpyDeviceToHost));
      NVST_CHECK_CUDA(cudaMemcpy(&s, sig, sizeof(s), cudaMemcpyDeviceToHost));
      const auto want = random_bytes(data_seed + static_cast<std::uint64_t>(from), kBuf);
      const long long e = check_region(got, doff, want.data() + so, size) + (k % 2 == 0 && s != 5);
      if (e && detail.empty())
        detail = std::to_string(size) + " bytes from " + kinds[kind] + (k % 2 ? " by putmem" : " by put_signal");
      errors += e;
    }
  }
  NVST_CHECK_CUDA(cudaFreeHost(pinned));
  suite.check("host putmem / putmem_signal_nbi across nodes from heap, cudaMalloc, pageable and pinned sources", errors,
              detail);
}

// ---- p / g -----------------------------------------------------------------

template <typename T>
__host__ __device__ T pg_value(int from, int to) {
  return static_cast<T>(static_cast<unsigned>(from * 37 + to * 11 + 5) & 0x7f);
}

template <typename T>
__global__ void p_kernel(T* slots, int me, int n) {
  for (int pe = threadIdx.x; pe < n; pe += blockDim.x) dev::p(slots + me, pg_value<T>(me, pe), pe);
  dev::quiet();
}

template <typename T>
__global__ void g_kernel(const T* slots, T* out, int n) {
  for (int pe = threadIdx.x; pe < n; pe += blockDim.x) out[pe] = dev::g(slots + 0, pe);
}

// p of every PE into its own slot on every PE (adjacent slots: a narrow p
// must leave its neighbours alone), then, with_g, g of every PE's slot 0.
template <typename T>
void pg_case(Suite& suite, const char* tname, char* sym, bool with_g = true) {
  const int me = nvst::my_pe(), n = nvst::n_pes();
  T* slots = reinterpret_cast<T*>(sym);
  NVST_CHECK_CUDA(cudaMemset(slots, 0xA5, sizeof(T) * static_cast<std::size_t>(n)));
  NVST_CHECK_CUDA(cudaDeviceSynchronize());
  nvst::barrier_all();
  p_kernel<T><<<1, 32>>>(slots, me, n);
  NVST_CHECK_LAUNCH();
  NVST_CHECK_CUDA(cudaDeviceSynchronize());
  nvst::barrier_all();
  std::vector<T> got(static_cast<std::size_t>(n));
  NVST_CHECK_CUDA(cudaMemcpy(got.data(), slots, sizeof(T) * static_cast<std::size_t>(n), cudaMemcpyDeviceToHost));
  long long errors = 0;
  for (int q = 0; q < n; ++q) errors += got[static_cast<std::size_t>(q)] != pg_value<T>(q, me);
  suite.check(std::string("p<") + tname + "> to every PE", errors);
  if (!with_g) return;
  // g: slot 0 of PE q holds pg_value(0, q).
  T* out = nullptr;
  NVST_CHECK_CUDA(cudaMalloc(&out, sizeof(T) * static_cast<std::size_t>(n)));
  g_kernel<T><<<1, 32>>>(slots, out, n);
  NVST_CHECK_LAUNCH();
  NVST_CHECK_CUDA(cudaMemcpy(got.data(), out, sizeof(T) * static_cast<std::size_t>(n), cudaMemcpyDeviceToHost));
  errors = 0;
  for (int q = 0; q < n; ++q) errors += got[static_cast<std::size_t>(q)] != pg_value<T>(0, q);
  NVST_CHECK_CUDA(cudaFree(out));
  nvst::barrier_all();
  suite.check(std::string("g<") + tname + "> from every PE", errors);
}

// ---- put_signal: a signal is never seen before its data -------------------

constexpr int kMessages = 200;
constexpr std::size_t kStride = 16384 + 64;

__host__ __device__ inline std::size_t msg_len(std::uint64_t seed, int k) {
  return static_cast<std::size_t>((seed * 2654435761u + static_cast<std::uint64_t>(k) * 40503u) % 16384) + 1;
}

template <Scope S>
__global__ void signal_ring_kernel(char* dst, const char* src, std::uint64_t* sig, SignalOp op, bool nbi, int next,
                                   int prev, std::uint64_t seed, unsigned long long* bad) {
  if (blockIdx.x == 0) {  // sender
    if (S == Scope::kThread && threadIdx.x != 0) return;
    if (S == Scope::kWarp && threadIdx.x >= 32) return;
    for (int k = 0; k < kMessages; ++k) {
      const std::size_t off = static_cast<std::size_t>(k) * kStride + static_cast<std::size_t>(k % 16);
      const std::uint64_t v = op == SignalOp::kSet ? static_cast<std::uint64_t>(k + 1) : 1;
      const std::size_t len = msg_len(seed, k);
      if constexpr (S == Scope::kThread) {
        if (nbi)
          dev::putmem_signal_nbi(dst + off, src + off, len, sig, v, op, next);
        else
          dev::putmem_signal(dst + off, src + off, len, sig, v, op, next);
      } else if constexpr (S == Scope::kWarp) {
        if (nbi)
          dev::putmem_signal_nbi_warp(dst + off, src + off, len, sig, v, op, next);
        else
          dev::putmem_signal_warp(dst + off, src + off, len, sig, v, op, next);
      } else {
        if (nbi)
          dev::putmem_signal_nbi_block(dst + off, src + off, len, sig, v, op, next);
        else
          dev::putmem_signal_block(dst + off, src + off, len, sig, v, op, next);
      }
    }
    return;
  }
  // receiver (block 1): after each signal, the message must be complete.
  __shared__ unsigned long long block_bad;
  if (threadIdx.x == 0) block_bad = 0;
  __syncthreads();
  for (int k = 0; k < kMessages; ++k) {
    if (threadIdx.x == 0) dev::signal_wait_until(sig, Cmp::kGe, static_cast<std::uint64_t>(k + 1));
    __syncthreads();
    const std::size_t off = static_cast<std::size_t>(k) * kStride + static_cast<std::size_t>(k % 16);
    const std::size_t len = msg_len(seed, k);
    unsigned long long mine = 0;
    for (std::size_t i = threadIdx.x; i < len; i += blockDim.x)
      mine += static_cast<std::uint8_t>(dst[off + i]) != pat(seed, prev, off + i);
    if (mine) atomicAdd(&block_bad, mine);
    __syncthreads();
  }
  if (threadIdx.x == 0) *bad = block_bad;
}

template <Scope S>
void signal_case(Suite& suite, const char* scope_name, SignalOp op, bool nbi, char* sym_src, char* sym_dst,
                 std::uint64_t* sig, unsigned long long* bad) {
  const int me = nvst::my_pe(), n = nvst::n_pes();
  const std::uint64_t seed =
      g_seed + static_cast<std::uint64_t>(S) * 13 + (op == SignalOp::kAdd ? 100 : 0) + (nbi ? 1000 : 0);
  const auto [b, s] = run_signal_kernel(sym_src, sym_dst, sig, bad, seed, [&] {
    signal_ring_kernel<S><<<2, 256>>>(sym_dst, sym_src, sig, op, nbi, (me + 1) % n, (me + n - 1) % n, seed, bad);
  });
  long long errors = static_cast<long long>(b) + (s != static_cast<std::uint64_t>(kMessages));
  suite.check(std::string(nbi ? "putmem_signal_nbi" : "putmem_signal") + " " + scope_name +
                  (op == SignalOp::kSet ? " SET" : " ADD") + " (200 messages, data checked at signal)",
              errors, "final signal " + std::to_string(s));
}

// ---- wait_until with every comparison -------------------------------------

template <typename T>
__global__ void wait_kernel(T* word, Cmp cmp, T threshold, T newval, int next, T* observed) {
  if (blockIdx.x == 0) {
    const std::uint64_t t0 = dev::global_timer_ns();
    while (dev::global_timer_ns() - t0 < 20000) {  // let the waiter start first
    }
    dev::p(word, newval, next);
  } else {
    if constexpr (sizeof(T) == 8 && std::is_unsigned_v<T>)
      *observed = dev::signal_wait_until(word, cmp, threshold);
    else
      *observed = dev::wait_until(word, cmp, threshold);
  }
}

template <typename T>
void wait_case(Suite& suite, const char* tname, char* sym) {
  struct C {
    Cmp cmp;
    T init, threshold, newval;
    const char* name;
  };
  const C cases[] = {{Cmp::kEq, 0, 42, 42, "EQ"}, {Cmp::kNe, 7, 7, 9, "NE"},     {Cmp::kGt, 0, 10, 11, "GT"},
                     {Cmp::kGe, 0, 10, 10, "GE"}, {Cmp::kLt, 100, 50, 49, "LT"}, {Cmp::kLe, 100, 50, 50, "LE"}};
  const int me = nvst::my_pe(), n = nvst::n_pes();
  T* word = reinterpret_cast<T*>(sym);
  T* observed = nullptr;
  NVST_CHECK_CUDA(cudaMalloc(&observed, sizeof(T)));
  for (const C& c : cases) {
    NVST_CHECK_CUDA(cudaMemcpy(word, &c.init, sizeof(T), cudaMemcpyHostToDevice));
    NVST_CHECK_CUDA(cudaDeviceSynchronize());
    nvst::barrier_all();
    wait_kernel<T><<<2, 1>>>(word, c.cmp, c.threshold, c.newval, (me + 1) % n, observed);
    NVST_CHECK_LAUNCH();
    NVST_CHECK_CUDA(cudaDeviceSynchronize());
    T got{};
    NVST_CHECK_CUDA(cudaMemcpy(&got, observed, sizeof(T), cudaMemcpyDeviceToHost));
    nvst::barrier_all();
    suite.check(std::string(sizeof(T) == 8 && std::is_unsigned_v<T> ? "signal_wait_until" : "wait_until<") +
                    (sizeof(T) == 8 && std::is_unsigned_v<T> ? "" : std::string(tname) + ">") + " " + c.name,
                got != c.newval);
  }
  NVST_CHECK_CUDA(cudaFree(observed));
}

// ---- fence and quiet ordering ---------------------------------------------

__global__ void fence_kernel(char* data, const char* src, std::uint64_t* flag, std::uint64_t* sig, int next, int prev,
                             std::uint64_t seed, int rounds, unsigned long long* bad) {
  constexpr std::size_t kLen = 8192;
  if (blockIdx.x == 0) {
    if (threadIdx.x != 0) return;
    for (int r = 1; r <= rounds; ++r) {
      const std::size_t off = static_cast<std::size_t>(r) * kLen;
      dev::putmem(data + off, src + off, kLen, next);
      dev::fence();  // the data to `next` is ordered before the flag to `next`
      dev::p(flag, static_cast<std::uint64_t>(r), next);
      dev::putmem_nbi(data + off + (2u << 20), src + off, kLen, next);
      dev::quiet();  // complete, so a plain signal after it covers it
      dev::signal_op(sig, 1, SignalOp::kAdd, next);
    }
    return;
  }
  if (threadIdx.x != 0) return;
  unsigned long long b = 0;
  for (int r = 1; r <= rounds; ++r) {
    const std::size_t off = static_cast<std::size_t>(r) * kLen;
    dev::wait_until(flag, Cmp::kGe, static_cast<std::uint64_t>(r));
    for (std::size_t i = 0; i < kLen; i += 61)
      b += static_cast<std::uint8_t>(data[off + i]) != pat(seed, prev, off + i);
    dev::signal_wait_until(sig, Cmp::kGe, static_cast<std::uint64_t>(r));
    for (std::size_t i = 0; i < kLen; i += 61)
      b += static_cast<std::uint8_t>(data[off + (2u << 20) + i]) != pat(seed, prev, off + i);
  }
  *bad = b;
}

// ---- barrier at every scope -----------------------------------------------

template <Scope S>
__global__ void barrier_kernel(std::uint64_t* slot, int next, int iters, unsigned long long* bad) {
  unsigned long long b = 0;
  for (int i = 1; i <= iters; ++i) {
    if (threadIdx.x == 0) dev::p(slot, static_cast<std::uint64_t>(i), next);
    if constexpr (S == Scope::kThread)
      dev::barrier_all();
    else if constexpr (S == Scope::kWarp)
      dev::barrier_all_warp();
    else
      dev::barrier_all_block();
    if (threadIdx.x == 0) b += *reinterpret_cast<volatile std::uint64_t*>(slot) != static_cast<std::uint64_t>(i);
    if constexpr (S == Scope::kThread)
      dev::barrier_all();
    else if constexpr (S == Scope::kWarp)
      dev::barrier_all_warp();
    else
      dev::barrier_all_block();
  }
  if (threadIdx.x == 0) *bad = b;
}

template <Scope S>
void barrier_case(Suite& suite, const char* name, int threads, char* sym, unsigned long long* bad) {
  const int me = nvst::my_pe(), n = nvst::n_pes();
  NVST_CHECK_CUDA(cudaMemset(sym, 0, 64));
  NVST_CHECK_CUDA(cudaMemset(bad, 0xFF, sizeof(*bad)));
  NVST_CHECK_CUDA(cudaDeviceSynchronize());
  nvst::barrier_all();
  barrier_kernel<S><<<1, threads>>>(reinterpret_cast<std::uint64_t*>(sym), (me + 1) % n, g_barrier_iters, bad);
  NVST_CHECK_LAUNCH();
  NVST_CHECK_CUDA(cudaDeviceSynchronize());
  unsigned long long b = 0;
  NVST_CHECK_CUDA(cudaMemcpy(&b, bad, sizeof(b), cudaMemcpyDeviceToHost));
  nvst::barrier_all();
  suite.check(std::string(name) + " x" + std::to_string(g_barrier_iters) + " (neighbour's write visible after each)",
              static_cast<long long>(b));
}

// ---- host API on GPUs ------------------------------------------------------

__global__ void read_through_ptr(const std::uint8_t* p, std::size_t n, std::uint64_t seed, int pe,
                                 unsigned long long* bad) {
  unsigned long long b = 0;
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    b += p[i] != pat(seed, pe, i);
  if (b) atomicAdd(bad, b);
}

void host_api_cases(Suite& suite, char* sym_src, char* sym_dst, unsigned long long* bad) {
  const int me = nvst::my_pe(), n = nvst::n_pes(), next = (me + 1) % n, prev = (me + n - 1) % n;
  long long errors = 0;
  for (int round = 0; round < g_rounds; ++round) {
    std::mt19937_64 rng(g_seed * 77 + static_cast<std::uint64_t>(round));
    const std::size_t size = 1 + rng() % (3u << 20), so = rng() % 64, doff = rng() % 64;
    const std::uint64_t seed = g_seed + 500 + static_cast<std::uint64_t>(round);
    auto src = random_bytes(seed + static_cast<std::uint64_t>(me), kBuf);
    NVST_CHECK_CUDA(cudaMemcpy(sym_src, src.data(), kBuf, cudaMemcpyHostToDevice));
    NVST_CHECK_CUDA(cudaMemset(sym_dst, 0xA5, kBuf));
    NVST_CHECK_CUDA(cudaDeviceSynchronize());
    nvst::barrier_all();
    cudaStream_t s = nullptr;
    NVST_CHECK_CUDA(cudaStreamCreate(&s));
    nvst::putmem_on_stream(sym_dst + doff, sym_src + so, size, next, s);
    nvst::barrier_all_on_stream(s);
    NVST_CHECK_CUDA(cudaStreamSynchronize(s));
    std::vector<std::uint8_t> got(kBuf);
    NVST_CHECK_CUDA(cudaMemcpy(got.data(), sym_dst, kBuf, cudaMemcpyDeviceToHost));
    auto want = random_bytes(seed + static_cast<std::uint64_t>(prev), kBuf);
    errors += check_region(got, doff, want.data() + so, size);
    // get from next into a plain device buffer, stream-ordered and blocking.
    std::uint8_t* local = nullptr;
    NVST_CHECK_CUDA(cudaMalloc(&local, size));
    nvst::getmem_on_stream(local, sym_src + so, size, next, s);
    NVST_CHECK_CUDA(cudaStreamSynchronize(s));
    std::vector<std::uint8_t> g(size);
    NVST_CHECK_CUDA(cudaMemcpy(g.data(), local, size, cudaMemcpyDeviceToHost));
    auto nsrc = random_bytes(seed + static_cast<std::uint64_t>(next), kBuf);
    errors += std::memcmp(g.data(), nsrc.data() + so, size) != 0;
    nvst::getmem(local, sym_src, 1, next);
    std::uint8_t one = 0;
    NVST_CHECK_CUDA(cudaMemcpy(&one, local, 1, cudaMemcpyDeviceToHost));
    errors += one != nsrc[0];
    NVST_CHECK_CUDA(cudaFree(local));
    NVST_CHECK_CUDA(cudaStreamDestroy(s));
    nvst::barrier_all();
  }
  suite.check("putmem_on_stream + barrier_all_on_stream, getmem_on_stream, getmem", errors);

  // nvst::ptr: loads through a peer's mapping see the peer's data.
  const std::uint64_t seed = g_seed + 999;
  fill_pat<<<132, 256>>>(reinterpret_cast<std::uint8_t*>(sym_src), kBuf, seed, me);
  NVST_CHECK_LAUNCH();
  NVST_CHECK_CUDA(cudaMemset(bad, 0, sizeof(*bad)));
  NVST_CHECK_CUDA(cudaDeviceSynchronize());
  nvst::barrier_all();
  long long e = 0;
  for (int pe = 0; pe < n; ++pe) {
    auto* p = static_cast<const std::uint8_t*>(nvst::ptr(sym_src, pe));
    if (p == nullptr) {
      ++e;
      continue;
    }
    read_through_ptr<<<132, 256>>>(p, kBuf, seed, pe, bad);
    NVST_CHECK_LAUNCH();
  }
  unsigned long long b = 0;
  NVST_CHECK_CUDA(cudaMemcpy(&b, bad, sizeof(b), cudaMemcpyDeviceToHost));
  suite.check("nvst::ptr loads see every node peer's data", e + static_cast<long long>(b));

  // malloc/calloc/free round trip.
  const std::size_t before = nvst::heap_free_bytes();
  void* a = nvst::calloc(1000, 8);
  std::vector<std::uint64_t> z(1000, 1);
  NVST_CHECK_CUDA(cudaMemcpy(z.data(), a, 8000, cudaMemcpyDeviceToHost));
  long long nz = 0;
  for (auto v : z) nz += v != 0;
  nvst::free(a);
  suite.check("calloc zeroes; free returns the bytes", nz + (nvst::heap_free_bytes() != before));
}

void fence_case(Suite& suite, char* sym_src, char* sym_dst, std::uint64_t* flag, std::uint64_t* sig,
                unsigned long long* bad) {
  const int me = nvst::my_pe(), n = nvst::n_pes();
  const std::uint64_t seed = g_seed + 4242;
  fill_pat<<<132, 256>>>(reinterpret_cast<std::uint8_t*>(sym_src), kBuf, seed, me);
  NVST_CHECK_LAUNCH();
  NVST_CHECK_CUDA(cudaMemset(sym_dst, 0xA5, kBuf));
  NVST_CHECK_CUDA(cudaMemset(flag, 0, 8));
  NVST_CHECK_CUDA(cudaMemset(sig, 0, 8));
  NVST_CHECK_CUDA(cudaMemset(bad, 0, sizeof(*bad)));
  NVST_CHECK_CUDA(cudaDeviceSynchronize());
  nvst::barrier_all();
  fence_kernel<<<2, 32>>>(sym_dst, sym_src, flag, sig, (me + 1) % n, (me + n - 1) % n, seed, 200, bad);
  NVST_CHECK_LAUNCH();
  NVST_CHECK_CUDA(cudaDeviceSynchronize());
  unsigned long long b = 0;
  NVST_CHECK_CUDA(cudaMemcpy(&b, bad, sizeof(b), cudaMemcpyDeviceToHost));
  nvst::barrier_all();
  suite.check("fence orders put before flag; quiet completes put_nbi (200 rounds)", static_cast<long long>(b));
}

// ---- remote atomics under contention ---------------------------------------
// Every thread of every PE hits shared words on random PEs at once; the host
// then checks what a sequential execution allows (as tests/host/test_atomics):
// fetch_add and CAS-increment old values are exactly base, base + 1, ...;
// swap's returned values plus the last are the first plus those swapped in.
// One thread per PE also runs random ops of both widths on its own words on
// every PE, each result compared with a sequential model in the kernel.

constexpr int kAtomicThreads = 128, kAtomicIters = 8;
constexpr std::uint64_t kAtomicBase64 = (1ull << 40) + 7;
constexpr std::uint32_t kAtomicBase32 = 0xFFFFFF00u;

struct AtomicWords {
  unsigned long long add64, cas64, swap64;
  unsigned int add32, pad;
  unsigned long long priv64[8][4];  // [source PE][word]
  unsigned int priv32[8][4];
};
// Per op: the target and the old value (or value swapped in).
struct AtomicRecord {
  int target[kAtomicThreads * kAtomicIters];
  unsigned long long add64[kAtomicThreads * kAtomicIters], cas64[kAtomicThreads * kAtomicIters],
      swap_out[kAtomicThreads * kAtomicIters], swap_in[kAtomicThreads * kAtomicIters];
  unsigned int add32[kAtomicThreads * kAtomicIters];
};

__device__ std::uint64_t mix(std::uint64_t x) {
  x ^= x >> 31;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 29;
  return x;
}

__global__ void atomic_hammer(AtomicWords* w, AtomicRecord* rec, int me, int n, std::uint64_t seed,
                              unsigned long long* bad) {
  const int tid = blockIdx.x * blockDim.x + threadIdx.x;
  for (int j = 0; j < kAtomicIters; ++j) {
    const int i = tid * kAtomicIters + j;
    const int t = static_cast<int>(mix(seed + static_cast<std::uint64_t>(me) * 7919 + i) % n);
    rec->target[i] = t;
    rec->add64[i] = dev::atomic_fetch_add(&w->add64, 1ull, t);
    rec->add32[i] = dev::atomic_fetch_add(&w->add32, 1u, t);
    rec->cas64[i] = ~0ull;  // CAS increments from one thread in 8: all 128 contending would take O(128^2) tries
    for (; tid % 8 == 0;) {
      const unsigned long long cur = dev::atomic_fetch(&w->cas64, t);
      if (dev::atomic_compare_swap(&w->cas64, cur, cur + 1, t) == cur) {
        rec->cas64[i] = cur;
        break;
      }
    }
    const unsigned long long mine = (static_cast<unsigned long long>(me + 1) << 32) | static_cast<unsigned>(i);
    rec->swap_in[i] = mine;
    rec->swap_out[i] = dev::atomic_swap(&w->swap64, mine, t);
  }
  if (tid != 0) return;
  unsigned long long m64[8][4] = {};
  unsigned int m32[8][4] = {};
  for (int i = 0; i < 400; ++i) {
    const std::uint64_t v = mix(seed * 31 + static_cast<std::uint64_t>(me) * 1000003 + i);
    const int t = static_cast<int>((v >> 40) % n), k = static_cast<int>((v >> 50) & 3), op = static_cast<int>(v & 3);
    if ((v >> 2) & 1) {
      unsigned long long* a = &w->priv64[me][k];
      const unsigned long long want = m64[t][k];
      unsigned long long got;
      if (op == 0)
        got = dev::atomic_fetch_add(a, static_cast<unsigned long long>(v), t), m64[t][k] += v;
      else if (op == 1) {
        const unsigned long long cond = ((v >> 3) & 1) ? want : want + 1;
        got = dev::atomic_compare_swap(a, cond, static_cast<unsigned long long>(v), t);
        if (cond == want) m64[t][k] = v;
      } else if (op == 2)
        got = dev::atomic_swap(a, static_cast<unsigned long long>(v), t), m64[t][k] = v;
      else
        got = dev::atomic_fetch(a, t);
      if (got != want) atomicAdd(bad, 1ull);
    } else {
      unsigned int* a = &w->priv32[me][k];
      const unsigned int want = m32[t][k], v32 = static_cast<unsigned int>(v >> 8);
      unsigned int got;
      if (op == 0)
        got = dev::atomic_fetch_add(a, v32, t), m32[t][k] += v32;
      else if (op == 1) {
        const unsigned int cond = ((v >> 3) & 1) ? want : want + 1;
        got = dev::atomic_compare_swap(a, cond, v32, t);
        if (cond == want) m32[t][k] = v32;
      } else if (op == 2)
        got = dev::atomic_swap(a, v32, t), m32[t][k] = v32;
      else
        got = dev::atomic_fetch(a, t);
      if (got != want) atomicAdd(bad, 1ull);
    }
  }
}

void atomic_case(Suite& suite, unsigned long long* bad) {
  const int me = nvst::my_pe(), n = nvst::n_pes();
  if (n > 8) return;  // the private words are sized for 8 PEs
  auto* w = static_cast<AtomicWords*>(nvst::calloc(1, sizeof(AtomicWords)));
  AtomicWords init{};
  init.add64 = kAtomicBase64;
  init.cas64 = kAtomicBase64;
  init.swap64 = 0xAAAA;
  init.add32 = kAtomicBase32;
  NVST_CHECK_CUDA(cudaMemcpy(w, &init, sizeof(init), cudaMemcpyHostToDevice));
  AtomicRecord* rec = nullptr;
  NVST_CHECK_CUDA(cudaMalloc(&rec, sizeof(AtomicRecord)));
  NVST_CHECK_CUDA(cudaMemset(bad, 0, sizeof(*bad)));
  NVST_CHECK_CUDA(cudaDeviceSynchronize());
  nvst::barrier_all();
  atomic_hammer<<<kAtomicThreads / 64, 64>>>(w, rec, me, n, g_seed, bad);
  NVST_CHECK_LAUNCH();
  NVST_CHECK_CUDA(cudaDeviceSynchronize());
  nvst::barrier_all();
  unsigned long long model_errors = 0;
  NVST_CHECK_CUDA(cudaMemcpy(&model_errors, bad, sizeof(model_errors), cudaMemcpyDeviceToHost));
  std::vector<AtomicRecord> all(static_cast<std::size_t>(n));
  {
    auto host = std::make_unique<AtomicRecord>();
    NVST_CHECK_CUDA(cudaMemcpy(host.get(), rec, sizeof(AtomicRecord), cudaMemcpyDeviceToHost));
    auto bytes = nvst::bootstrap_allgather(host.get(), sizeof(AtomicRecord));
    std::memcpy(all.data(), bytes.data(), bytes.size());
  }
  AtomicWords final_words{};
  NVST_CHECK_CUDA(cudaMemcpy(&final_words, w, sizeof(final_words), cudaMemcpyDeviceToHost));
  std::vector<unsigned long long> a64, c64, out, in;
  std::vector<unsigned int> a32;
  for (const AtomicRecord& r : all)
    for (int i = 0; i < kAtomicThreads * kAtomicIters; ++i)
      if (r.target[i] == me) {
        a64.push_back(r.add64[i]);
        if (r.cas64[i] != ~0ull) c64.push_back(r.cas64[i]);
        a32.push_back(r.add32[i]);
        out.push_back(r.swap_out[i]);
        in.push_back(r.swap_in[i]);
      }
  long long errors = 0;
  std::sort(a64.begin(), a64.end());
  std::sort(c64.begin(), c64.end());
  for (std::size_t j = 0; j < a64.size(); ++j) errors += a64[j] != kAtomicBase64 + j;
  for (std::size_t j = 0; j < c64.size(); ++j) errors += c64[j] != kAtomicBase64 + j;
  errors += final_words.add64 != kAtomicBase64 + a64.size();
  errors += final_words.cas64 != kAtomicBase64 + c64.size();
  std::sort(a32.begin(), a32.end(), [](unsigned a, unsigned b) { return a - kAtomicBase32 < b - kAtomicBase32; });
  for (std::size_t j = 0; j < a32.size(); ++j) errors += a32[j] != static_cast<unsigned>(kAtomicBase32 + j);
  errors += final_words.add32 != static_cast<unsigned>(kAtomicBase32 + a32.size());
  out.push_back(final_words.swap64);
  in.push_back(0xAAAA);
  std::sort(out.begin(), out.end());
  std::sort(in.begin(), in.end());
  errors += out != in;
  NVST_CHECK_CUDA(cudaFree(rec));
  nvst::free(w);
  suite.check("remote atomics: fetch_add 32/64, compare_swap, swap under contention; random ops = sequential model",
              errors + static_cast<long long>(model_errors), "(model mismatches " + std::to_string(model_errors) + ")");
}

int finish_api_mode(Suite& suite, int me, unsigned long long* bad, std::uint64_t* flag, std::uint64_t* sig,
                    char* sym_small, char* sym_dst, char* sym_src) {
  NVST_CHECK_CUDA(cudaFree(bad));
  nvst::free(flag);
  nvst::free(sig);
  nvst::free(sym_small);
  nvst::free(sym_dst);
  nvst::free(sym_src);
  nvst::finalize();
  if (me == 0) std::printf("%d passed, %d failed\n", suite.passed, suite.failed);
  return suite.failed == 0 ? 0 : 1;
}

// Only the remote atomics (--mode atomics): a short run of that one case.
int atomics_mode() {
  nvst::init();
  Suite suite;
  unsigned long long* bad = nullptr;
  NVST_CHECK_CUDA(cudaMalloc(&bad, sizeof(*bad)));
  atomic_case(suite, bad);
  NVST_CHECK_CUDA(cudaFree(bad));
  nvst::finalize();
  return suite.failed == 0 ? 0 : 1;
}

int api_mode() {
  nvst::init();
  const int me = nvst::my_pe(), n = nvst::n_pes();
  NVST_REQUIRE(nvst::device() >= 0, "GPU tests need GPUs");
  // Several nodes (NVST_NODE_SIZE): the next PE is reached through the proxy.
  // Then what the proxy carries is tested (puts, put_signal, signals, p of
  // every width, fence, quiet, barriers); gets, g, TMA puts and the
  // copy-engine host API need load/store reach and are tested on one node.
  const bool internode = nvst::team_n_pes(nvst::Team::kNode) < n;
  if (internode) g_barrier_iters = 200;
  if (me == 0)
    std::printf("nvst_gpu_tests: %d PEs, %d per node (%s), heap %s, seed %llu, %d rounds\n", n,
                nvst::team_n_pes(nvst::Team::kNode), nvst::transport_to((me + 1) % n).c_str(),
                nvst::heap_kind_name(nvst::heap_kind()), static_cast<unsigned long long>(g_seed), g_rounds);
  Suite suite;
  char* sym_src = static_cast<char*>(nvst::malloc(kBuf));
  char* sym_dst = static_cast<char*>(nvst::malloc(kBuf));
  char* sym_small = static_cast<char*>(nvst::malloc(4096));
  auto* sig = static_cast<std::uint64_t*>(nvst::calloc(1, 8));
  auto* flag = static_cast<std::uint64_t*>(nvst::calloc(1, 8));
  unsigned long long* bad = nullptr;
  NVST_CHECK_CUDA(cudaMalloc(&bad, sizeof(*bad)));

  // Across nodes only what the proxy carries (see above); on one node all.
  pg_case<std::uint8_t>(suite, "uint8", sym_small, !internode);
  pg_case<std::uint16_t>(suite, "uint16", sym_small, !internode);
  pg_case<std::uint32_t>(suite, "uint32", sym_small, !internode);
  pg_case<std::uint64_t>(suite, "uint64", sym_small, !internode);
  pg_case<float>(suite, "float", sym_small, !internode);
  pg_case<double>(suite, "double", sym_small, !internode);

  const std::vector<Op> ops = internode ? std::vector<Op>{Op::kPut, Op::kPutNbi, Op::kPutTyped}
                                        : std::vector<Op>{Op::kPut, Op::kPutNbi, Op::kGet, Op::kGetNbi, Op::kPutTyped};
  for (int shift : {1, 0}) {
    for (Op op : ops) {
      rma_case<Scope::kThread>(suite, op, "thread", sym_src, sym_dst, shift);
      rma_case<Scope::kWarp>(suite, op, "warp", sym_src, sym_dst, shift);
      rma_case<Scope::kBlock>(suite, op, "block", sym_src, sym_dst, shift);
    }
    if (!internode) rma_case<Scope::kBlock>(suite, Op::kPutTma, "block", sym_src, sym_dst, shift);
  }
  stream_ordered_source_case(suite, sym_dst);
  {
    char* outside = nullptr;  // a source outside the heap
    NVST_CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&outside), kBuf));
    staged_put_case<Scope::kThread>(suite, "thread", sym_src, sym_dst, outside);
    staged_put_case<Scope::kWarp>(suite, "warp", sym_src, sym_dst, outside);
    staged_put_case<Scope::kBlock>(suite, "block", sym_src, sym_dst, outside);
    many_producers_case<Scope::kThread>(suite, "thread", sym_src, sym_dst, outside);
    many_producers_case<Scope::kWarp>(suite, "warp", sym_src, sym_dst, outside);
    many_producers_case<Scope::kBlock>(suite, "block", sym_src, sym_dst, outside);
    staged_signal_case<Scope::kThread>(suite, "thread", sym_src, sym_dst, outside, sig, bad);
    staged_signal_case<Scope::kWarp>(suite, "warp", sym_src, sym_dst, outside, sig, bad);
    staged_signal_case<Scope::kBlock>(suite, "block", sym_src, sym_dst, outside, sig, bad);
    if (internode) host_staged_put_case(suite, sym_src, sym_dst, outside, sig);
    NVST_CHECK_CUDA(cudaFree(outside));
  }

  for (bool nbi : {false, true}) {
    for (SignalOp op : {SignalOp::kSet, SignalOp::kAdd}) {
      signal_case<Scope::kThread>(suite, "thread", op, nbi, sym_src, sym_dst, sig, bad);
      signal_case<Scope::kWarp>(suite, "warp", op, nbi, sym_src, sym_dst, sig, bad);
      signal_case<Scope::kBlock>(suite, "block", op, nbi, sym_src, sym_dst, sig, bad);
    }
  }

  wait_case<std::uint64_t>(suite, "uint64", sym_small);
  if (!internode) wait_case<std::int32_t>(suite, "int32", sym_small);
  wait_case<std::int64_t>(suite, "int64", sym_small);

  fence_case(suite, sym_src, sym_dst, flag, sig, bad);

  barrier_case<Scope::kThread>(suite, "barrier_all (thread)", 1, sym_small, bad);
  barrier_case<Scope::kWarp>(suite, "barrier_all_warp", 32, sym_small, bad);
  barrier_case<Scope::kBlock>(suite, "barrier_all_block", 256, sym_small, bad);

  atomic_case(suite, bad);
  if (!internode) host_api_cases(suite, sym_src, sym_dst, bad);
  return finish_api_mode(suite, me, bad, flag, sig, sym_small, sym_dst, sym_src);
}

// ---- errors mode -----------------------------------------------------------

__global__ void never_satisfied(std::uint64_t* sig) { dev::signal_wait_until(sig, Cmp::kGe, 1); }
__global__ void put_to(char* dst, const char* src, int pe) { dev::putmem_nbi(dst, src, 64, pe); }
__global__ void barrier_block() { dev::barrier_all_block(); }

// PE 1 dies without a word after the first barrier; PE 0, in a host or a
// device barrier, must be told which PE is gone within 10 s, on either
// backend (on NVSHMEM both barriers are ours for that reason: sync.cuh).
[[noreturn]] void dead_peer_scenario(bool device) {
  if (nvst::my_pe() != 0) _exit(0);
  const auto t0 = std::chrono::steady_clock::now();
  std::string msg;
  try {
    if (device) {
      barrier_block<<<1, 64>>>();
      NVST_CHECK_LAUNCH();
      NVST_CHECK_CUDA(cudaDeviceSynchronize());
    } else {
      nvst::barrier_all();
    }
  } catch (const nvst::Error& e) {
    msg = e.what();
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Device: the word the host sets when its watch sees PE 1 go, before the
  // device timeout (2 s here) would name the barrier instead.
  const char* want = device ? "PE 1 died" : "rank 1";
  const bool ok = msg.find(want) != std::string::npos && s < 10.0;
  std::printf("%s dead peer in a %s barrier: told in %.1f s, expected '%s' in: %s\n", ok ? "PASS" : "FAIL",
              device ? "device" : "host", s, want, msg.c_str());
  std::fflush(stdout);
  _exit(ok ? 0 : 1);
}

int error_scenario(const std::string& scenario) {
  nvst::init();
  const int me = nvst::my_pe();
  char* sym = static_cast<char*>(nvst::malloc(4096));
  auto* sig = static_cast<std::uint64_t*>(nvst::calloc(1, 8));
  nvst::barrier_all();
  if (scenario == "deadpeer_host" || scenario == "deadpeer_device") dead_peer_scenario(scenario == "deadpeer_device");
  if (me != 0) {
    // The survivor must hear that PE 0 is gone, not hang.
    std::string msg;
    try {
      nvst::bootstrap_barrier();
    } catch (const nvst::Error& e) {
      msg = e.what();
    }
    const bool ok = msg.find("rank 0") != std::string::npos;
    std::printf("%s survivor saw: %s\n", ok ? "PASS" : "FAIL", msg.c_str());
    std::fflush(stdout);
    _exit(ok ? 0 : 1);
  }
  std::string want, msg;
  try {
    if (scenario == "timeout") {
      want = "timed out";
      never_satisfied<<<1, 1>>>(sig);
    } else if (scenario == "badpe") {
      want = "out of range";
      put_to<<<1, 1>>>(sym, sym + 1024, nvst::n_pes());
    } else {
      want = "not inside the symmetric heap";
      char* plain = nullptr;
      NVST_CHECK_CUDA(cudaMalloc(&plain, 4096));
      put_to<<<1, 1>>>(plain, sym, 1);
    }
    NVST_CHECK_LAUNCH();
    NVST_CHECK_CUDA(cudaDeviceSynchronize());
  } catch (const nvst::Error& e) {
    msg = e.what();
  }
  const bool ok = msg.find(want) != std::string::npos && msg.find("device-side cause") != std::string::npos;
  std::printf("%s scenario %s: expected '%s' in: %s\n", ok ? "PASS" : "FAIL", scenario.c_str(), want.c_str(),
              msg.c_str());
  std::fflush(stdout);
  _exit(ok ? 0 : 1);
}

}  // namespace

int main(int argc, char** argv) {
  int np = 2;
  std::string mode = "api";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--np")
      np = std::atoi(next().c_str());
    else if (a == "--seed")
      g_seed = std::strtoull(next().c_str(), nullptr, 10);
    else if (a == "--rounds")
      g_rounds = std::atoi(next().c_str());
    else if (a == "--mode")
      mode = next();
    else {
      std::fprintf(stderr, "usage: %s --np N [--seed S] [--rounds R] [--mode api|errors|atomics]\n", argv[0]);
      return 2;
    }
  }
  if (np < 2 || g_rounds < 1 || (mode != "api" && mode != "errors" && mode != "atomics")) {
    std::fprintf(stderr, "need --np >= 2, --rounds >= 1, --mode api|errors|atomics\n");
    return 2;
  }
  try {
    if (const char* sc = std::getenv("NVST_TEST_SCENARIO"); sc && nvst::is_pe_process()) return error_scenario(sc);
    if (nvst::is_pe_process()) return mode == "atomics" ? atomics_mode() : api_mode();
    if (int skip = nvst::test::skip_unless_gpus(np)) return skip;
    std::vector<std::string> args(argv, argv + argc);
    if (mode == "api" || mode == "atomics") return nvst::spawn_and_wait({np, args, {}, 15});
    int failed = 0, passed = 0;
    for (const char* sc : {"timeout", "badpe", "notsym", "deadpeer_host", "deadpeer_device"}) {
      int rc = nvst::spawn_and_wait(
          {2, args, {{"NVST_TEST_SCENARIO", sc}, {"NVST_DEVICE_TIMEOUT_S", "2"}, {"NVST_TIMEOUT_S", "30"}}, 15});
      std::printf("%s errors/%s\n", rc == 0 ? "PASS" : "FAIL", sc);
      (rc == 0 ? passed : failed)++;
    }
    std::printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nvst_gpu_tests: %s\n", e.what());
    return 1;
  }
}
