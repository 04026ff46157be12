// Ordering and synchronisation inside kernels: fence, quiet, barrier_all
// (nvshmem_fence, nvshmem_quiet, nvshmem_barrier_all and the _warp/_block
// forms of nvshmemx).
#pragma once

#include <cstdint>

#include "nvst/device/copy.cuh"
#include "nvst/device/signal.cuh"
#include "nvst/device/state.cuh"

namespace nvst::dev {

// Orders this thread's earlier puts to each PE before its later ones.
__device__ __forceinline__ void fence() {
  NVST_IF_NVSHMEM(nvshmem_fence(); return)
  __threadfence_system();
  proxy_fence();
}

// Completes this thread's earlier puts and gets: after quiet() the data is
// visible at the target PE (system scope).
__device__ __forceinline__ void quiet() {
  NVST_IF_NVSHMEM(nvshmem_quiet(); return)
  __threadfence_system();
  proxy_quiet();
}

// Barrier over all PEs, callable inside a kernel by one thread, one warp or
// one block per PE (the same scope on every PE, one barrier at a time). Like
// nvshmem_barrier_all it first quiets the caller's puts, so data put before
// the barrier is visible everywhere after it.
//
// How: every PE keeps a count of barriers entered (barrier_seq, identical on
// all PEs because barriers are collective). Entering barrier n, a PE stores n
// with release into flags[my_pe] on every peer, then waits until its own
// flags[p] >= n for every p. Counts only grow, so no reset is needed between
// barriers and a fast PE's next arrival cannot be mistaken for this one's.
//
// On the NVSHMEM backend too: nvshmem_barrier_all waits for ever on a peer
// that died, and this wait ends in NVST_DEVICE_TIMEOUT_S with a message
// naming the PE (the flags live in the reserved head of NVSHMEM's heap, and
// its peers are reached by load/store as ours are). Only the quiet is
// NVSHMEM's: each thread completes its own puts first.
template <Scope S>
__device__ __forceinline__ void barrier_all_scope() {
  using G = Group<S>;
  const DeviceState& s = state();
  __shared__ std::uint64_t shared_seq;  // only used by the block scope
  NVST_IF_NVSHMEM(nvshmem_quiet())
  G::sync();
  std::uint64_t seq = 0;
  if (G::rank() == 0) {
    __threadfence_system();  // quiet: the callers' earlier puts complete first
    proxy_quiet();
    seq = ++*s.barrier_seq;
    if constexpr (S == Scope::kBlock) shared_seq = seq;
  }
  if constexpr (S == Scope::kWarp) seq = __shfl_sync(0xffffffffu, seq, 0);
  if constexpr (S == Scope::kBlock) {
    __syncthreads();
    seq = shared_seq;
  }
  std::uint64_t* my_flag = s.barrier_flags + s.my_pe;
  for (int pe = static_cast<int>(G::rank()); pe < s.n_pes; pe += static_cast<int>(G::size())) {
    if (!on_node(pe) && has_proxy()) {  // another node: a signal SET through the proxy
      proxy_push(proxy::Op::kSignal, pe, 0, nullptr, 0, heap_offset(my_flag), seq,
                 static_cast<std::uint8_t>(proxy::SignalOp::kSet));
      continue;
    }
    auto* remote = reinterpret_cast<std::uint64_t*>(rma_address(my_flag, sizeof(std::uint64_t), pe));
    detail::st_release_sys(remote, seq);
  }
  for (int pe = static_cast<int>(G::rank()); pe < s.n_pes; pe += static_cast<int>(G::size())) {
    detail::wait_until_impl<std::uint64_t>(s.barrier_flags + pe, Cmp::kGe, seq, FailKind::kBarrierTimeout, pe);
  }
  G::sync();
}

__device__ __forceinline__ void barrier_all() { barrier_all_scope<Scope::kThread>(); }
__device__ __forceinline__ void barrier_all_warp() { barrier_all_scope<Scope::kWarp>(); }
__device__ __forceinline__ void barrier_all_block() { barrier_all_scope<Scope::kBlock>(); }

}  // namespace nvst::dev
