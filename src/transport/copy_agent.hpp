// A PE's copy agent: a process of its own on the PE's GPU that lands the
// inbox pieces peers wrote (host memory) into this PE's GPU heap, with its
// own CUDA context and streams. The proxy thread hands it landing requests
// through shared memory (copy_agent_channel.hpp) and makes no CUDA call on
// the data path itself.
//
// Why a process: CUDA work of the user's process can stall any CUDA call
// of that process. A pageable copy queued behind a kernel that waits on the
// proxy holds the process's driver until the kernel ends, and that kernel
// waits for a landing the proxy could then not queue: a deadlock until the
// device timeout. Another process has its own driver state and its own
// hardware queues; measured on one H200 its copies went on while the user's
// process was held (docs/06, "Failure"). A kernel resident in the user's
// process (even in a green context) would make every
// cudaDeviceSynchronize() wait for it, and one resident in another process
// would take turns with the user's kernels: copies are what remains.
//
// The agent maps the heap (cuMem fd or CUDA IPC handle), the inboxes and
// the channel from descriptors it inherits; it exits when asked, when its
// parent dies (PR_SET_PDEATHSIG) or on its first error, which it writes
// into the channel for the proxy to report.
#pragma once

#include <sys/types.h>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/shared_mapping.hpp"
#include "transport/copy_agent_channel.hpp"

namespace nvst {

// How another process maps this PE's heap.
struct HeapShare {
  int cumem_fd = -1;  // a cuMem POSIX descriptor of the heap's memory (the caller closes it), or
  bool ipc = false;   // a legacy CUDA IPC handle
  cudaIpcMemHandle_t ipc_handle{};
  std::size_t bytes = 0;
};

class CopyAgent {
 public:
  // Starts the agent on `device` and waits (up to timeout_s) until it has
  // mapped `heap` and `inboxes`. `spin_us`: how long it polls for requests
  // before it sleeps until the proxy rings it.
  CopyAgent(const HeapShare& heap, const SharedMapping& inboxes, int device, std::uint32_t capacity, int spin_us,
            double timeout_s);
  ~CopyAgent();  // asks it to exit; kills it after a second
  CopyAgent(const CopyAgent&) = delete;
  CopyAgent& operator=(const CopyAgent&) = delete;

  // Whether another request fits in the ring now.
  bool has_room() const;
  // Publishes a request (has_room() was true) and rings the agent if it
  // sleeps; returns its number.
  std::uint64_t post(const copy_agent::Request& r);
  // Whether request `n` is finished in GPU memory. Throws the agent's error
  // once it failed.
  bool finished(std::uint64_t n) const;
  // The old value of atomic request `n` (once finished).
  std::uint64_t result(std::uint64_t n) const;
  // Throws if the agent process is gone (a system call: call it rarely).
  void check_alive() const;
  pid_t pid() const { return pid_; }

 private:
  [[noreturn]] void throw_failure() const;
  SharedMapping channel_mem_;
  copy_agent::Channel* ch_ = nullptr;
  copy_agent::Request* ring_ = nullptr;
  std::uint64_t* results_ = nullptr;
  std::uint32_t mask_ = 0;
  std::uint64_t posted_ = 0;
  pid_t pid_ = -1;
  int pidfd_ = -1;
};

}  // namespace nvst
