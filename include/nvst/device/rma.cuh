// One-sided remote memory access from a kernel: p/g, put/get.
//
// Semantics are NVSHMEM's (nvshmem_p, nvshmem_putmem, nvshmemx_putmem_warp,
// nvshmemx_putmem_nbi_block, ...):
//  - `dest` of a put and `src` of a get are symmetric addresses (from
//    nvst::malloc) naming the object on PE `pe`; the other pointer is any
//    memory this thread can read or write.
//  - A blocking put returns when `src` may be reused; the data is delivered
//    to `pe` by the next quiet() (or barrier). A blocking get returns when the
//    data is in `dest`. _nbi forms may return earlier: their buffers may be
//    touched only after quiet().
//  - _warp and _block forms are called by every thread of the warp / block
//    with the same arguments; they share the copy and synchronise the group
//    on exit.
// Over NVLink (peers of this node) a put is plain 16-byte stores through the
// peer's mapped heap and a get is loads, so the blocking and _nbi forms do the
// same work; they differ once a put may go through the proxy (other nodes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "nvst/device/copy.cuh"
#include "nvst/device/nvshmem_backend.cuh"
#include "nvst/device/proxy.cuh"
#include "nvst/device/stage.cuh"
#include "nvst/device/state.cuh"

namespace nvst::dev {

// ---- single elements -------------------------------------------------------

// *dest on `pe` = value. T is 1, 2, 4 or 8 bytes. A volatile store: it is not
// merged with or reordered against other volatile accesses of this thread.
// To a PE of another node it travels as a signal SET of its width through
// the proxy (no source buffer to stage: the value rides in the command).
template <typename T>
__device__ __forceinline__ void p(T* dest, T value, int pe) {
  static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8,
                "nvst::dev::p: element must be 1, 2, 4 or 8 bytes");
  NVST_IF_NVSHMEM(check_pe(pe); check_symmetric(dest, sizeof(T)); nvshmem_putmem(dest, &value, sizeof(T), pe); return)
  check_pe(pe);
  if (!on_node(pe) && has_proxy()) {
    check_symmetric(dest, sizeof(T));
    std::uint64_t bits = 0;
    memcpy(&bits, &value, sizeof(T));
    constexpr proxy::SignalOp kSet = proxy::set_of_width(sizeof(T));
    proxy_push(proxy::Op::kSignal, pe, 0, nullptr, 0, heap_offset(dest), bits, static_cast<std::uint8_t>(kSet));
    return;
  }
  *reinterpret_cast<volatile T*>(rma_address(dest, sizeof(T), pe)) = value;
}

// Returns *src on `pe` (a volatile load).
template <typename T>
__device__ __forceinline__ T g(const T* src, int pe) {
  static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8,
                "nvst::dev::g: element must be 1, 2, 4 or 8 bytes");
  NVST_IF_NVSHMEM(check_pe(pe); check_symmetric(src, sizeof(T)); T v; nvshmem_getmem(&v, src, sizeof(T), pe); return v)
  return *reinterpret_cast<const volatile T*>(rma_address(src, sizeof(T), pe));
}

// ---- bulk, any scope -------------------------------------------------------

// A put to a PE of another node: once every member has arrived (so `src`
// is ready), the group copies it into staging slots itself and posts a
// command per piece to the proxy (stage.cuh).
template <Scope S>
__device__ __forceinline__ void put_scope(void* dest, const void* src, std::size_t bytes, int pe) {
  if (bytes == 0) return;
  check_pe(pe);
  NVST_IF_NVSHMEM(check_symmetric(dest, bytes); nvshmem_backend::put<S>(dest, src, bytes, pe, true); return)
  if (!on_node(pe) && has_proxy()) {
    check_symmetric(dest, bytes);
    Group<S>::sync();
    stage_put<S>(pe, heap_offset(dest), src, bytes, false, 0, 0, 0);
    Group<S>::sync();
    return;
  }
  group_copy<S>(rma_address(dest, bytes, pe), src, bytes);
}

// Blocking puts: `src` may be reused on return. Over NVLink the stores are
// done; through the proxy the group waits until it has completed them.
template <Scope S>
__device__ __forceinline__ void put_blocking(void* dest, const void* src, std::size_t bytes, int pe) {
  NVST_IF_NVSHMEM(if (bytes == 0) return; check_pe(pe); check_symmetric(dest, bytes);
                  nvshmem_backend::put<S>(dest, src, bytes, pe, false); return)
  put_scope<S>(dest, src, bytes, pe);
  if (bytes != 0 && !on_node(pe) && has_proxy()) {
    if (Group<S>::rank() == 0) proxy_quiet();
    Group<S>::sync();
  }
}

template <Scope S>
__device__ __forceinline__ void get_scope(void* dest, const void* src, std::size_t bytes, int pe) {
  if (bytes == 0) return;
  NVST_IF_NVSHMEM(check_pe(pe); check_symmetric(src, bytes); nvshmem_backend::get<S>(dest, src, bytes, pe); return)
  group_copy<S>(dest, rma_address(src, bytes, pe), bytes);
}

// ---- the NVSHMEM-named entry points ---------------------------------------

__device__ __forceinline__ void putmem_nbi(void* dest, const void* src, std::size_t bytes, int pe) {
  put_scope<Scope::kThread>(dest, src, bytes, pe);
}
__device__ __forceinline__ void putmem_nbi_warp(void* dest, const void* src, std::size_t bytes, int pe) {
  put_scope<Scope::kWarp>(dest, src, bytes, pe);
}
__device__ __forceinline__ void putmem_nbi_block(void* dest, const void* src, std::size_t bytes, int pe) {
  put_scope<Scope::kBlock>(dest, src, bytes, pe);
}

__device__ __forceinline__ void putmem(void* dest, const void* src, std::size_t bytes, int pe) {
  put_blocking<Scope::kThread>(dest, src, bytes, pe);
}
__device__ __forceinline__ void putmem_warp(void* dest, const void* src, std::size_t bytes, int pe) {
  put_blocking<Scope::kWarp>(dest, src, bytes, pe);
  __syncwarp();
}
__device__ __forceinline__ void putmem_block(void* dest, const void* src, std::size_t bytes, int pe) {
  put_blocking<Scope::kBlock>(dest, src, bytes, pe);
  __syncthreads();
}

__device__ __forceinline__ void getmem_nbi(void* dest, const void* src, std::size_t bytes, int pe) {
  get_scope<Scope::kThread>(dest, src, bytes, pe);
}
__device__ __forceinline__ void getmem_nbi_warp(void* dest, const void* src, std::size_t bytes, int pe) {
  get_scope<Scope::kWarp>(dest, src, bytes, pe);
}
__device__ __forceinline__ void getmem_nbi_block(void* dest, const void* src, std::size_t bytes, int pe) {
  get_scope<Scope::kBlock>(dest, src, bytes, pe);
}

__device__ __forceinline__ void getmem(void* dest, const void* src, std::size_t bytes, int pe) {
  get_scope<Scope::kThread>(dest, src, bytes, pe);
}
__device__ __forceinline__ void getmem_warp(void* dest, const void* src, std::size_t bytes, int pe) {
  get_scope<Scope::kWarp>(dest, src, bytes, pe);
  __syncwarp();
}
__device__ __forceinline__ void getmem_block(void* dest, const void* src, std::size_t bytes, int pe) {
  get_scope<Scope::kBlock>(dest, src, bytes, pe);
  __syncthreads();
}

// Typed forms: nelems elements of T (nvshmem_TYPE_put and friends).
template <typename T>
__device__ __forceinline__ void put(T* dest, const T* src, std::size_t nelems, int pe) {
  putmem(dest, src, nelems * sizeof(T), pe);
}
template <typename T>
__device__ __forceinline__ void put_nbi(T* dest, const T* src, std::size_t nelems, int pe) {
  putmem_nbi(dest, src, nelems * sizeof(T), pe);
}
template <typename T>
__device__ __forceinline__ void put_warp(T* dest, const T* src, std::size_t nelems, int pe) {
  putmem_warp(dest, src, nelems * sizeof(T), pe);
}
template <typename T>
__device__ __forceinline__ void put_block(T* dest, const T* src, std::size_t nelems, int pe) {
  putmem_block(dest, src, nelems * sizeof(T), pe);
}
template <typename T>
__device__ __forceinline__ void get(T* dest, const T* src, std::size_t nelems, int pe) {
  getmem(dest, src, nelems * sizeof(T), pe);
}
template <typename T>
__device__ __forceinline__ void get_warp(T* dest, const T* src, std::size_t nelems, int pe) {
  getmem_warp(dest, src, nelems * sizeof(T), pe);
}
template <typename T>
__device__ __forceinline__ void get_block(T* dest, const T* src, std::size_t nelems, int pe) {
  getmem_block(dest, src, nelems * sizeof(T), pe);
}

}  // namespace nvst::dev
