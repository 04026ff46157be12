// Host threads' puts from GPU memory on GPU heaps: the calling thread copies
// the data into the host staging ring itself (proxy_fifo.hpp, "Staged
// pieces") and posts one kPutStaged command per piece, so the proxy thread
// makes no CUDA call to send. CUDA calls in the caller's thread are fine:
// one that waits behind the user's own queue holds only that thread.
//
// Pipelined: up to kWindow pieces' copies are queued on the caller's lane
// (a non-blocking stream and an event per piece) before the oldest is
// waited for and posted, so the copy of piece i+1 runs while the proxy
// sends piece i.
//
// Why no thread can deadlock on the ring: a thread never waits for a slot
// while it holds slots whose pieces it has not posted (it posts them first),
// so every wait is for a ticket lower than the waiter's own, whose holder
// either posted it (the proxy completes it without anyone's help) or waits,
// itself holding nothing unposted, for a still lower one; the lowest such
// ticket is free or posted.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "nvst/proxy_fifo.hpp"
#include "transport/fifo_host.hpp"

namespace nvst::proxy {

class HostStager {
 public:
  static constexpr int kWindow = 4;  // pieces copied ahead of the one posted
  // `slots`: n_slots ring slots of kSlotBytes (pinned, registered); `done`:
  // their words (ticket + 1 of the last piece whose write completed, stored
  // by the proxy with release); `piece_bytes`: data per piece; `device`:
  // the heap's GPU (the lanes' streams live there).
  HostStager(char* slots, std::uint64_t* done, int n_slots, std::size_t piece_bytes, int device,
             HostProducer& producer);
  ~HostStager();
  HostStager(const HostStager&) = delete;
  HostStager& operator=(const HostStager&) = delete;

  // Stages and posts `c` (kPut or kPutSignal, c.src GPU memory, c.bytes > 0)
  // piece by piece; the last piece of a put_signal carries its signal.
  // Returns the last piece's ticket in the FIFO. `then_wait` as
  // HostProducer::push (for the last piece).
  std::uint64_t put(const Command& c, Op op, bool then_wait);

 private:
  struct Lane {
    cudaStream_t stream = nullptr;
    cudaEvent_t copied[kWindow] = {};
  };
  Lane* take_lane();
  void give_lane(Lane* lane);

  char* slots_;
  std::uint64_t* done_;
  std::uint64_t n_slots_;
  std::size_t piece_bytes_;
  int device_;
  HostProducer& producer_;
  std::atomic<std::uint64_t> tickets_{0};
  std::mutex lanes_mu_;  // guards lanes_ and idle_
  std::vector<std::unique_ptr<Lane>> lanes_;
  std::vector<Lane*> idle_;
};

}  // namespace nvst::proxy
