/* The C ABI between `nvst bench` and the NVSHMEM baseline plugin
 * (libnvst_nvshmem_baseline.so). The plugin is loaded with dlopen only when
 * NVSHMEM is present, so nvst itself never links NVSHMEM. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Broadcast `bytes` at `data` from `root` to every PE (nvst's bootstrap). */
typedef void (*nvstb_broadcast_fn)(void* data, size_t bytes, int root);

/* Starts NVSHMEM over nvst's bootstrap (rank 0's unique ID broadcast), once
 * per process: a second call returns 0, a call after nvstb_finalize fails.
 * Sets NVSHMEM_DISABLE_NVLS=1 always, and NVSHMEM_DISABLE_NCCL=1 unless set.
 * 0 on success; else a message in err. */
int nvstb_init(int rank, int nranks, nvstb_broadcast_fn bcast, char* err, size_t errlen);
void* nvstb_malloc(size_t bytes);
void nvstb_free(void* p);
/* A kernel of `blocks` x `threads`; block b puts its 16-byte-aligned chunk
 * with nvshmemx_putmem_nbi_block, then nvshmem_quiet. */
int nvstb_put(void* dst, const void* src, size_t bytes, int pe, int blocks, int threads, cudaStream_t stream);
/* `iters` round trips of nvshmem_uint64_p + nvshmem_uint64_wait_until on `flag`. */
int nvstb_pingpong(uint64_t* flag, int me, int peer, int iters, cudaStream_t stream);
void nvstb_barrier_all(void);

/* NVSHMEM's stream-ordered collectives on NVSHMEM_TEAM_WORLD (`nvst bench
 * coll`). The numbers are part of the ABI: add new ones, never renumber. */
enum { NVSTB_ALL_REDUCE = 0, NVSTB_ALL_GATHER = 1, NVSTB_REDUCE_SCATTER = 2, NVSTB_ALL_TO_ALL = 3 };
enum { NVSTB_F32 = 0, NVSTB_BF16 = 1, NVSTB_F16 = 2, NVSTB_I32 = 3, NVSTB_I64 = 4 };
enum { NVSTB_SUM = 0, NVSTB_MAX = 1, NVSTB_MIN = 2 };

/* 0 when NVSHMEM's collectives can run in this job; else why not in err.
 * They cannot where several PEs share a GPU without MPS: NVSHMEM exits the
 * process there instead of returning an error. Ask after a first
 * nvstb_malloc: without a CUDA context at init NVSHMEM sets up its device
 * state (and learns how PEs share GPUs) only at its first call. */
int nvstb_coll_supported(char* err, size_t errlen);
/* The largest source, in bytes per PE, that NVSHMEM can take for `coll`
 * (SIZE_MAX: no limit). reduce_scatter without NVLS holds its whole source
 * in a scratch of NVSHMEM_REDUCE_SCRATCH_SIZE / 2 bytes, read at init. */
int nvstb_coll_max_bytes(int coll, size_t* max_bytes, char* err, size_t errlen);
/* One collective, enqueued on `stream`; src and dst from nvstb_malloc.
 * `count` as NCCL's: the elements of one PE's part.
 *   all_reduce      src count,         dst count          (nvshmemx_<t>_<op>_reduce_on_stream)
 *   all_gather      src count,         dst count x npes   (nvshmemx_<t>_fcollect_on_stream)
 *   reduce_scatter  src count x npes,  dst count          (nvshmemx_<t>_<op>_reducescatter_on_stream)
 *   all_to_all      src count x npes,  dst count x npes   (nvshmemx_<t>_alltoall_on_stream)
 * `op` is read by the reductions only. Whether a call captures into a CUDA
 * graph is NVSHMEM's business: a caller that captures must be ready for the
 * capture to fail. NVSHMEM checks its own kernel launches (and exits on a
 * failed one). 0 on success; else the argument refused, or NVSHMEM's nonzero
 * return, in err. */
int nvstb_collective(int coll, int dtype, int op, void* dst, const void* src, size_t count, cudaStream_t stream,
                     char* err, size_t errlen);
void nvstb_finalize(void);
const char* nvstb_version(void);

#ifdef __cplusplus
}
#endif
