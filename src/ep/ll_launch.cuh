// How the low-latency kernels count their launches (low_latency.cu).
//
// The peer counters (ready, done) only grow: a launch of B blocks adds B to
// counter[me] on every PE, and a PE waits until counter[p] reaches the
// blocks of all earlier launches plus B. That base is kept once per block
// index (LaunchCounters::ll_base): block b reads word b, then writes base +
// B into every word j = b (mod B), so that a later launch of any grid finds
// it in its own word. A launch's blocks touch disjoint words, and the next
// launch of the kind starts after this one finished (the stream's order; a
// kernel launched early waits for it in wait_previous_kernel first). One
// counter word that every block added to cost a block 1.5-2 us at 132
// blocks: atomics on one address are served one at a time. Nothing happens
// at the end of a block, so a kernel ends when its last stores drain (the
// normal mode's launch_end instead costs every block a fence and an atomic
// there).
#pragma once

#include <cstdint>

#include "ep/ep_device.cuh"
#include "ep/kernels.hpp"

namespace nvst::ep::detail {

// Called by every thread at the start of a block: the base (blocks of all
// earlier launches of the kind).
__device__ __forceinline__ unsigned long long ll_launch_begin(LaunchCounters* c) {
  __shared__ unsigned long long base;
  if (threadIdx.x == 0) base = *reinterpret_cast<const volatile unsigned long long*>(&c->ll_base[blockIdx.x]);
  __syncthreads();
  const unsigned long long next = base + gridDim.x;
  for (unsigned j = blockIdx.x + threadIdx.x * gridDim.x; j < kLlMaxBlocks; j += blockDim.x * gridDim.x)
    c->ll_base[j] = next;
  return base;
}

// In a kernel that follows a send half of the kind on the stream (a
// receive half): what that send half's done signals reach, its base + B.
__device__ __forceinline__ unsigned long long ll_launch_end_count(const LaunchCounters* c) {
  __shared__ unsigned long long end;
  if (threadIdx.x == 0) end = *reinterpret_cast<const volatile unsigned long long*>(&c->ll_base[blockIdx.x]);
  __syncthreads();
  return end;
}

// The start of every low-latency send half: the base, then the ready
// handshake (enter_send_half in ep_device.cuh, this PE left out).
__device__ __forceinline__ unsigned long long ll_enter_send_half(LaunchCounters* c, std::uint64_t* ready) {
  const unsigned long long base = ll_launch_begin(c);
  signal_all_pes(ready, base + gridDim.x, true);
  wait_pes(ready, 0, dev::state().n_pes, 1, base + 1, dev::state().my_pe);
  return base;
}

// One thread of a block: adds 1 to a counter of this GPU (device memory)
// after everything the block did before (a release at GPU scope, after a
// barrier). No value comes back, so the thread does not wait for it.
__device__ __forceinline__ void ll_count_block(unsigned long long* counter) {
  asm volatile("red.release.gpu.global.add.u64 [%0], 1;" ::"l"(counter) : "memory");
}

}  // namespace nvst::ep::detail
