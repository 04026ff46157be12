// The NVSHMEM backend of the device API (NVST_BACKEND=nvshmem).
//
// In a job started on NVSHMEM the symmetric heap is one nvshmem_malloc
// region (src/runtime/heap_nvshmem.cpp), so every nvst symmetric address is
// also an NVSHMEM symmetric address, and the device API's remote operations
// (put, get, p, g, put_signal, signal_op, fence, quiet) call their
// nvshmem/nvshmemx namesakes instead of our own NVLink stores. Waits on
// local words (signal_wait_until, wait_until) stay ours: they read this PE's
// memory either way and keep their timeout, which NVSHMEM's have not. So
// does the barrier (sync.cuh): our flags, after nvshmem_quiet. The
// argument checks (PE range, symmetric range) run first on both backends.
//
// Only code compiled with NVST_WITH_NVSHMEM (targets linked to
// nvst::nvst_nvshmem) contains these calls; elsewhere on_nvshmem() is a
// constant false and the compiler removes every branch.
#pragma once

#include <cstddef>
#include <cstdint>

#include "nvst/device/copy.cuh"
#include "nvst/device/state.cuh"

#ifdef NVST_WITH_NVSHMEM
#include <nvshmem.h>
#include <nvshmemx.h>
#endif

#ifdef __CUDACC__
namespace nvst::dev {

// NVST_IF_NVSHMEM(statements): run them instead of ours in a job on NVSHMEM;
// nothing at all in code compiled without NVSHMEM.
#ifdef NVST_WITH_NVSHMEM
#define NVST_IF_NVSHMEM(...) \
  if (::nvst::dev::on_nvshmem()) { \
    __VA_ARGS__; \
  }
#else
#define NVST_IF_NVSHMEM(...)
#endif

// True in a job running on NVSHMEM.
__device__ __forceinline__ bool on_nvshmem() {
#ifdef NVST_WITH_NVSHMEM
  return state().backend == kBackendNvshmem;
#else
  return false;
#endif
}

#ifdef NVST_WITH_NVSHMEM
namespace nvshmem_backend {

inline __device__ int signal_op_code(bool add) { return add ? NVSHMEM_SIGNAL_ADD : NVSHMEM_SIGNAL_SET; }

template <Scope S>
__device__ __forceinline__ void put(void* dest, const void* src, std::size_t bytes, int pe, bool nbi) {
  if constexpr (S == Scope::kThread) {
    nbi ? nvshmem_putmem_nbi(dest, src, bytes, pe) : nvshmem_putmem(dest, src, bytes, pe);
  } else if constexpr (S == Scope::kWarp) {
    nbi ? nvshmemx_putmem_nbi_warp(dest, src, bytes, pe) : nvshmemx_putmem_warp(dest, src, bytes, pe);
  } else {
    nbi ? nvshmemx_putmem_nbi_block(dest, src, bytes, pe) : nvshmemx_putmem_block(dest, src, bytes, pe);
  }
}

template <Scope S>
__device__ __forceinline__ void get(void* dest, const void* src, std::size_t bytes, int pe) {
  if constexpr (S == Scope::kThread) {
    nvshmem_getmem(dest, src, bytes, pe);
  } else if constexpr (S == Scope::kWarp) {
    nvshmemx_getmem_warp(dest, src, bytes, pe);
  } else {
    nvshmemx_getmem_block(dest, src, bytes, pe);
  }
}

template <Scope S>
__device__ __forceinline__ void put_signal(void* dest, const void* src, std::size_t bytes, std::uint64_t* sig,
                                           std::uint64_t value, bool add, int pe, bool nbi) {
  const int op = signal_op_code(add);
  if constexpr (S == Scope::kThread) {
    nbi ? nvshmem_putmem_signal_nbi(dest, src, bytes, sig, value, op, pe)
        : nvshmem_putmem_signal(dest, src, bytes, sig, value, op, pe);
  } else if constexpr (S == Scope::kWarp) {
    nbi ? nvshmemx_putmem_signal_nbi_warp(dest, src, bytes, sig, value, op, pe)
        : nvshmemx_putmem_signal_warp(dest, src, bytes, sig, value, op, pe);
  } else {
    nbi ? nvshmemx_putmem_signal_nbi_block(dest, src, bytes, sig, value, op, pe)
        : nvshmemx_putmem_signal_block(dest, src, bytes, sig, value, op, pe);
  }
}

// Remote atomics (atomic.cuh) on the word's bits: NVSHMEM's uint32 and
// uint64 forms cover every 4- and 8-byte integer.
#define NVST_NVSHMEM_AMO(T, call32, call64) \
  if constexpr (sizeof(T) == 8) { \
    using U = std::uint64_t; \
    return static_cast<T>(call64); \
  } else { \
    using U = std::uint32_t; \
    return static_cast<T>(call32); \
  }
template <typename T>
__device__ __forceinline__ T atomic_fetch_add(T* dest, T value, int pe) {
  NVST_NVSHMEM_AMO(T, nvshmem_uint32_atomic_fetch_add(reinterpret_cast<U*>(dest), static_cast<U>(value), pe),
                   nvshmem_uint64_atomic_fetch_add(reinterpret_cast<U*>(dest), static_cast<U>(value), pe))
}
template <typename T>
__device__ __forceinline__ T atomic_compare_swap(T* dest, T cond, T value, int pe) {
  NVST_NVSHMEM_AMO(
      T,
      nvshmem_uint32_atomic_compare_swap(reinterpret_cast<U*>(dest), static_cast<U>(cond), static_cast<U>(value), pe),
      nvshmem_uint64_atomic_compare_swap(reinterpret_cast<U*>(dest), static_cast<U>(cond), static_cast<U>(value), pe))
}
template <typename T>
__device__ __forceinline__ T atomic_swap(T* dest, T value, int pe) {
  NVST_NVSHMEM_AMO(T, nvshmem_uint32_atomic_swap(reinterpret_cast<U*>(dest), static_cast<U>(value), pe),
                   nvshmem_uint64_atomic_swap(reinterpret_cast<U*>(dest), static_cast<U>(value), pe))
}
template <typename T>
__device__ __forceinline__ T atomic_fetch(const T* dest, int pe) {
  NVST_NVSHMEM_AMO(T, nvshmem_uint32_atomic_fetch(reinterpret_cast<const U*>(dest), pe),
                   nvshmem_uint64_atomic_fetch(reinterpret_cast<const U*>(dest), pe))
}
#undef NVST_NVSHMEM_AMO

}  // namespace nvshmem_backend
#endif  // NVST_WITH_NVSHMEM

}  // namespace nvst::dev
#endif  // __CUDACC__
