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

/* 0 on success; else a message in err. */
int nvstb_init(int rank, int nranks, nvstb_broadcast_fn bcast, char* err, size_t errlen);
void* nvstb_malloc(size_t bytes);
void nvstb_free(void* p);
/* A kernel of `blocks` x `threads`; block b puts its 16-byte-aligned chunk
 * with nvshmemx_putmem_nbi_block, then nvshmem_quiet. */
int nvstb_put(void* dst, const void* src, size_t bytes, int pe, int blocks, int threads,
              cudaStream_t stream);
/* `iters` round trips of nvshmem_uint64_p + nvshmem_uint64_wait_until on `flag`. */
int nvstb_pingpong(uint64_t* flag, int me, int peer, int iters, cudaStream_t stream);
void nvstb_barrier_all(void);
void nvstb_finalize(void);
const char* nvstb_version(void);

#ifdef __cplusplus
}
#endif
