// What a kernel knows about the job: this PE, the node's heaps as mapped into
// this process, the barrier words, the wait timeout, and where to report a
// fatal device-side error. The runtime (src/device/state.cu) fills one copy
// per process in constant memory after nvst::init; kernels read it through
// nvst::dev::state(). Code that includes this header is compiled with
// relocatable device code (-rdc) so that all kernels of a program share that
// one copy, as NVSHMEM does with libnvshmem_device.a.
#pragma once

#include <cstddef>
#include <cstdint>

#include "nvst/proxy_fifo.hpp"

namespace nvst::dev {

// PEs of one node that a process can map (NVLink domain). World size itself
// is not limited by this.
inline constexpr int kMaxNodePes = 64;
// World PEs whose barrier words fit in the reserved region.
inline constexpr int kMaxPes = 4096;
// The first bytes of every heap belong to the runtime (barrier words); user
// allocations start after them.
inline constexpr std::size_t kReservedHeapBytes = 64 * 1024;

// Which implementation carries the device API's remote operations
// (DeviceState::backend): ours, or NVSHMEM's (nvshmem_backend.cuh).
inline constexpr int kBackendNvst = 0;
inline constexpr int kBackendNvshmem = 1;

// Why a kernel stopped itself (written to DeviceError::kind).
enum class FailKind : int {
  kNone = 0,
  kWaitTimeout = 1,     // signal_wait_until / wait_until did not see its value
  kBarrierTimeout = 2,  // barrier: a peer did not arrive
  kBadPe = 3,           // PE out of range
  kNotSymmetric = 4,    // address outside the symmetric heap
  kUnreachable = 5,     // peer not reachable by load/store (and no proxy for this call)
  kProxyTimeout = 6,    // the proxy did not take or complete a command in time
  kProxyFailed = 7,     // the proxy stopped on an error (the host log says which)
  kBadArgument = 8,     // a library kernel found a bad value in its input (offset: where)
  kCountMismatch = 9,   // a collective's peer sent another byte count than this PE expects
  kPeerDied = 10,       // the host learned that PE peer_pe died (DeviceState::dead_pe)
  kCallMismatch = 11,   // a collective's member made another call (observed: its call's bits, expected: ours)
};

// A fatal device-side error, written to pinned host memory before the kernel
// traps, so the host can say in words who waited for what from whom.
struct DeviceError {
  int flag;  // 0 until a kernel fails; the first failure wins
  int kind;  // FailKind
  int my_pe;
  int peer_pe;  // the PE waited for or addressed, -1 if unknown
  int block;
  int thread;
  int cmp;                 // comparison of a wait (nvst::dev::Cmp), else -1; kCallMismatch: this PE's team
  int arg;                 // kCallMismatch: this PE's root (-1: none); else -1
  std::uint64_t offset;    // heap offset of the word or address concerned; kCallMismatch: this PE's count
  std::uint64_t observed;  // value seen last
  std::uint64_t expected;  // value waited for
};

struct DeviceState {
  int my_pe;
  int n_pes;
  int node_first_pe;  // the node team is world PEs [node_first_pe, +node_n_pes)
  int node_n_pes;
  char* heap_base;  // this PE's heap
  std::size_t heap_size;
  char* peer_base[kMaxNodePes];         // node PE i's heap as mapped here, or nullptr
  std::uint64_t* barrier_seq;           // local: barriers this PE has entered
  std::uint64_t* barrier_flags;         // symmetric: flags[p] = last barrier p reached here
  std::uint64_t timeout_ns;             // device wait timeout; 0 = none
  DeviceError* error;                   // pinned host mailbox
  proxy::FifoShared* fifo;              // commands to the proxy (pinned, mapped); nullptr: no proxy
  unsigned long long* fifo_tail;        // its producers' ticket counter (device memory)
  unsigned long long* fifo_head_cache;  // the last `head` a producer read (device memory)
  // Where kernels stage their puts to other nodes (proxy_fifo.hpp, "Staged
  // pieces"; device/stage.cuh): slot k of the ring at stage_ring + k *
  // proxy::kSlotBytes and its word stage_done[k] (pinned, mapped), the
  // ring's ticket counter (device memory), and the data bytes of a piece.
  char* stage_ring;
  const std::uint64_t* stage_done;
  unsigned long long* stage_tickets;
  std::uint64_t stage_slots;
  std::uint64_t stage_piece_bytes;
  int initialized;
  int backend;  // kBackendNvst or kBackendNvshmem
  // Pinned, mapped: the rank the host learned had died (the bootstrap's
  // watch), -1 while none; nullptr: not kept. Device waits read it with
  // their clock, so a wait on a dead PE's word ends naming it.
  const volatile int* dead_pe;
  // PEs of this job on this PE's GPU (time slicing), and this PE's place
  // among them (by rank): fail() takes turns at stopping (see there).
  int gpu_sharers;
  int gpu_turn;
};

}  // namespace nvst::dev

#ifdef __CUDACC__
#include <cstdio>

namespace nvst::dev {

extern __constant__ DeviceState g_device_state;
// Claimed (0 -> 1) by the first failing thread. In device memory, because
// atomics on pinned host memory are not guaranteed atomic over PCIe.
extern __device__ int g_device_failure_claimed;

__device__ __forceinline__ const DeviceState& state() { return g_device_state; }

__device__ __forceinline__ std::uint64_t global_timer_ns() {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Records the first failure in the host mailbox, prints it, and traps: the
// kernel and the context end, and the host's next CUDA check throws with the
// mailbox's description attached.
//
// PEs that time-share one GPU stop in turns: a trap that comes while the
// driver is still handling another context's trap is lost (its warps stay
// at the trap and the host waits for the kernel for ever; seen with two
// PEs on one H200 whose calls differed, which find it within microseconds
// of each other). So PE i of n sharers traps only in the first half of
// second i of every n seconds (the GPU's global timer, which every context
// reads alike): any two traps are half a second apart, at a cost of up to
// n seconds, on shared GPUs only.
__device__ __noinline__ inline void fail(FailKind kind, int peer_pe, std::uint64_t offset, std::uint64_t observed,
                                         std::uint64_t expected, int cmp, int arg = -1) {
  const DeviceState& s = state();
  DeviceError* e = s.error;
  if (e != nullptr && atomicCAS(&g_device_failure_claimed, 0, 1) == 0) {
    e->kind = static_cast<int>(kind);
    e->my_pe = s.my_pe;
    e->peer_pe = peer_pe;
    e->block = static_cast<int>(blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z));
    e->thread = static_cast<int>(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
    e->cmp = cmp;
    e->arg = arg;
    e->offset = offset;
    e->observed = observed;
    e->expected = expected;
    __threadfence_system();
    *reinterpret_cast<volatile int*>(&e->flag) = 1;  // published last
    __threadfence_system();
  }
  printf(
      "[nvst PE %d] device error kind=%d peer=%d offset=0x%llx observed=%llu expected=%llu "
      "(block %d thread %d)\n",
      s.my_pe, static_cast<int>(kind), peer_pe, static_cast<unsigned long long>(offset),
      static_cast<unsigned long long>(observed), static_cast<unsigned long long>(expected),
      static_cast<int>(blockIdx.x), static_cast<int>(threadIdx.x));
  if (s.gpu_sharers > 1) {
    constexpr std::uint64_t kTurnNs = 1000000000ull;
    for (;;) {
      const std::uint64_t t = global_timer_ns();
      if (static_cast<int>((t / kTurnNs) % static_cast<std::uint64_t>(s.gpu_sharers)) == s.gpu_turn &&
          t % kTurnNs < kTurnNs / 2)
        break;
      __nanosleep(100000);
    }
  }
  __trap();
}

__device__ __forceinline__ std::uint64_t heap_offset(const void* addr) {
  return static_cast<std::uint64_t>(static_cast<const char*>(addr) - state().heap_base);
}

// Argument checks cost a few instructions per call (not per byte); define
// NVST_DEVICE_NO_CHECKS to compile them out.
__device__ __forceinline__ void check_pe(int pe) {
#ifndef NVST_DEVICE_NO_CHECKS
  if (static_cast<unsigned>(pe) >= static_cast<unsigned>(state().n_pes)) fail(FailKind::kBadPe, pe, 0, 0, 0, -1);
#endif
}

__device__ __forceinline__ void check_symmetric(const void* addr, std::size_t bytes) {
#ifndef NVST_DEVICE_NO_CHECKS
  const DeviceState& s = state();
  const char* p = static_cast<const char*>(addr);
  if (p < s.heap_base || bytes > s.heap_size || static_cast<std::size_t>(p - s.heap_base) > s.heap_size - bytes)
    fail(FailKind::kNotSymmetric, -1, reinterpret_cast<std::uint64_t>(addr), bytes, s.heap_size, -1);
#else
  (void)addr;
  (void)bytes;
#endif
}

// The address through which this thread reaches `pe`'s copy of the symmetric
// object at `addr`, or nullptr when `pe` is not on this node (load/store
// reach only node peers).
__device__ __forceinline__ char* peer_address(const void* addr, int pe) {
  const DeviceState& s = state();
  unsigned idx = static_cast<unsigned>(pe - s.node_first_pe);
  if (idx >= static_cast<unsigned>(s.node_n_pes)) return nullptr;
  char* base = s.peer_base[idx];
  if (base == nullptr) return nullptr;
  return base + (static_cast<const char*>(addr) - s.heap_base);
}

// Whether `pe` is reachable by load/store (this node's PEs).
__device__ __forceinline__ bool on_node(int pe) {
  const DeviceState& s = state();
  unsigned idx = static_cast<unsigned>(pe - s.node_first_pe);
  return idx < static_cast<unsigned>(s.node_n_pes) && s.peer_base[idx] != nullptr;
}

// peer_address for an RMA call: validates pe and range, and stops the kernel
// with a message when the peer is unreachable.
__device__ __forceinline__ char* rma_address(const void* addr, std::size_t bytes, int pe) {
  check_pe(pe);
  check_symmetric(addr, bytes);
  char* remote = peer_address(addr, pe);
  if (remote == nullptr) fail(FailKind::kUnreachable, pe, heap_offset(addr), 0, 0, -1);
  return remote;
}

}  // namespace nvst::dev
#endif  // __CUDACC__
