// The copy agent's loop: take landing requests from the ring in order, queue
// each one's copy (inbox -> heap) and its signal or atomic on one stream,
// then a stream write of `done`, so the proxy learns that a request
// finished from a word in host memory, with no CUDA call of its own.
#include "runtime/copy_agent_process.hpp"

#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include <cuda_runtime_api.h>

#include "nvst/error.hpp"
#include "nvst/proxy_fifo.hpp"
#include "base/shared_mapping.hpp"
#include "device/device_runtime.hpp"
#include "runtime/driver_api.hpp"
#include "transport/copy_agent_channel.hpp"

namespace nvst {

namespace {

using copy_agent::Channel;
using copy_agent::Request;
using Clock = std::chrono::steady_clock;

template <typename T>
T load_acquire(const T& v) {
  return std::atomic_ref<const T>(v).load(std::memory_order_acquire);
}

// The heap as this process maps it.
struct MappedHeap {
  char* base = nullptr;
  std::size_t bytes = 0;
  CUmemGenericAllocationHandle handle = 0;
  bool ipc = false;

  MappedHeap(const std::string& how, std::size_t size, int device) : bytes(size) {
    if (how == "fd") {
      const auto& cu = driver::api();
      NVST_CHECK_CU(cu.MemImportFromShareableHandle(&handle, reinterpret_cast<void*>(std::uintptr_t{5}),
                                                    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
      CUdeviceptr at = 0;
      NVST_CHECK_CU(cu.MemAddressReserve(&at, bytes, 0, 0, 0));
      NVST_CHECK_CU(cu.MemMap(at, bytes, 0, handle, 0));
      CUmemAccessDesc access{};
      access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      access.location.id = device;
      access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
      NVST_CHECK_CU(cu.MemSetAccess(at, bytes, &access, 1));
      base = reinterpret_cast<char*>(at);
      ::close(5);
      return;
    }
    NVST_REQUIRE(how.rfind("ipc:", 0) == 0 && how.size() == 4 + 2 * sizeof(cudaIpcMemHandle_t),
                 "copy agent: heap handle '", how, "' is neither fd nor ipc:<hex>");
    cudaIpcMemHandle_t h{};
    for (std::size_t i = 0; i < sizeof(h.reserved); ++i)
      h.reserved[i] = static_cast<char>(std::stoi(how.substr(4 + 2 * i, 2), nullptr, 16));
    void* p = nullptr;
    NVST_CHECK_CUDA(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess));
    base = static_cast<char*>(p);
    ipc = true;
  }
};

class Agent {
 public:
  Agent(Channel* ch, char* inboxes, std::size_t inbox_bytes, MappedHeap& heap, int spin_us, pid_t parent)
      : ch_(ch), inboxes_(inboxes), inbox_bytes_(inbox_bytes), heap_(heap), spin_(spin_us), parent_(parent) {
    ring_ = copy_agent::ring(ch);
    mask_ = ch->capacity - 1;
    NVST_CHECK_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    void* dev = nullptr;
    NVST_CHECK_CUDA(cudaHostGetDevicePointer(&dev, &ch->done, 0));
    done_ = reinterpret_cast<CUdeviceptr>(dev);
    NVST_CHECK_CUDA(cudaHostGetDevicePointer(&dev, copy_agent::results(ch), 0));
    results_ = static_cast<std::uint64_t*>(dev);
  }

  void run() {
    std::uint64_t taken = 0;
    auto idle_since = Clock::now();
    for (;;) {
      if (load_acquire(ch_->stop) != 0) break;
      const std::uint64_t posted = load_acquire(ch_->posted);
      if (taken < posted) {
        for (; taken < posted; ++taken) queue(ring_[taken & mask_], taken);
        // After everything queued: the GPU writes it once those are done.
        NVST_CHECK_CU(driver::api().StreamWriteValue64(stream_, done_, taken, CU_STREAM_WRITE_VALUE_DEFAULT));
        idle_since = Clock::now();
        continue;
      }
      if (Clock::now() - idle_since < spin_) continue;
      sleep_until_rung(posted);
      if (::getppid() != parent_) break;  // orphaned (PR_SET_PDEATHSIG covers most of it)
      idle_since = Clock::now();
    }
    NVST_CHECK_CUDA(cudaStreamSynchronize(stream_));
  }

 private:
  // Queues request n's work on the stream, after the checks a request of
  // the proxy always passes (the proxy checked the piece's header).
  void queue(const Request& slot, std::uint64_t n) {
    NVST_REQUIRE(load_acquire(slot.seq) == n + 1, "copy agent: request ", n, " was not published in order");
    const Request r = slot;
    NVST_REQUIRE(r.bytes <= inbox_bytes_ && r.src <= inbox_bytes_ - r.bytes && r.bytes <= heap_.bytes &&
                     r.dest <= heap_.bytes - r.bytes,
                 "copy agent: request ", n, " is out of bounds (src ", r.src, ", dest ", r.dest, ", bytes ", r.bytes,
                 ")");
    if (r.bytes)
      NVST_CHECK_CUDA(cudaMemcpyAsync(heap_.base + r.dest, inboxes_ + r.src, r.bytes, cudaMemcpyHostToDevice, stream_));
    if (r.kind == copy_agent::kLandSignal) {
      const std::uint64_t width = proxy::signal_width(r.sig_op);
      NVST_REQUIRE(r.sig <= heap_.bytes - width, "copy agent: signal of request ", n, " is out of bounds");
      auto* word = reinterpret_cast<std::uint64_t*>(heap_.base + r.sig);
      if (r.sig_op == static_cast<std::uint8_t>(proxy::SignalOp::kAdd))
        detail::launch_signal_add(word, r.sig_value, stream_);
      else  // the SET's value from the ring (pinned), which stays until `done` passes n
        NVST_CHECK_CUDA(cudaMemcpyAsync(word, &slot.sig_value, width, cudaMemcpyHostToDevice, stream_));
    } else if (r.kind == copy_agent::kAtomic) {
      NVST_REQUIRE(r.sig <= heap_.bytes - 8, "copy agent: atomic of request ", n, " is out of bounds");
      detail::launch_remote_atomic(heap_.base + r.sig, r.sig_op, r.sig_value, r.compare, &results_[n & mask_], stream_);
    } else {
      NVST_REQUIRE(r.kind == copy_agent::kLand, "copy agent: request ", n, " has unknown kind ",
                   static_cast<int>(r.kind));
    }
  }

  // Sleeps until the proxy rings, the parent may be gone (a second), or
  // `posted` moved meanwhile.
  void sleep_until_rung(std::uint64_t posted) {
    const std::uint32_t bell = std::atomic_ref<std::uint32_t>(ch_->bell).load(std::memory_order_seq_cst);
    std::atomic_ref<std::uint32_t>(ch_->sleeping).store(1, std::memory_order_seq_cst);
    if (std::atomic_ref<std::uint64_t>(ch_->posted).load(std::memory_order_seq_cst) == posted &&
        load_acquire(ch_->stop) == 0) {
      const timespec limit{1, 0};
      ::syscall(SYS_futex, &ch_->bell, FUTEX_WAIT, bell, &limit, nullptr, 0);
    }
    std::atomic_ref<std::uint32_t>(ch_->sleeping).store(0, std::memory_order_seq_cst);
  }

  Channel* ch_;
  Request* ring_ = nullptr;
  std::uint64_t mask_ = 0;
  char* inboxes_;
  std::size_t inbox_bytes_;
  MappedHeap& heap_;
  std::chrono::microseconds spin_;
  pid_t parent_;
  cudaStream_t stream_ = nullptr;
  CUdeviceptr done_ = 0;
  std::uint64_t* results_ = nullptr;
};

}  // namespace

int run_copy_agent(int argc, char** argv) {
  if (argc != 7) {
    std::fprintf(stderr, "nvst-copy-agent: started by a PE's proxy, not by hand\n");
    return 2;
  }
  const pid_t parent = static_cast<pid_t>(std::atol(argv[1]));
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) return 1;  // the parent died before the line above
  // The channel first, so that every later failure reaches the proxy. Its
  // size follows from the capacity in its first page.
  std::uint32_t capacity = 0;
  if (void* head = ::mmap(nullptr, 4096, PROT_READ, MAP_SHARED, 4, 0); head != MAP_FAILED) {
    capacity = static_cast<const Channel*>(head)->capacity;
    ::munmap(head, 4096);
  }
  if (capacity == 0 || (capacity & (capacity - 1)) != 0) {
    std::fprintf(stderr, "nvst-copy-agent: no channel on descriptor 4: started by a PE's proxy, not by hand\n");
    return 2;
  }
  SharedMapping channel_mem;
  Channel* ch = nullptr;
  try {
    channel_mem = SharedMapping::adopt(4, copy_agent::channel_bytes(capacity));
    ch = reinterpret_cast<Channel*>(channel_mem.data());
    const std::size_t inbox_bytes = std::stoull(argv[3]);
    SharedMapping inboxes = SharedMapping::adopt(3, inbox_bytes);
    int device = -1;
    NVST_CHECK_CUDA(cudaDeviceGetByPCIBusId(&device, argv[2]));
    NVST_CHECK_CUDA(cudaSetDevice(device));
    MappedHeap heap(argv[5], std::stoull(argv[4]), device);
    // Pinned: copies from the inboxes are DMA, and so is a SET's value from
    // the ring; the channel mapped too, for the stream write of `done` and
    // the atomics' old values.
    NVST_CHECK_CUDA(cudaHostRegister(inboxes.data(), inboxes.size(), cudaHostRegisterDefault));
    NVST_CHECK_CUDA(cudaHostRegister(channel_mem.data(), channel_mem.size(), cudaHostRegisterMapped));
    detail::preload_runtime_kernels();  // no lazy load behind a user kernel later
    Agent agent(ch, inboxes.data(), inboxes.size(), heap, std::stoi(argv[6]), parent);
    std::atomic_ref<std::uint64_t>(ch->ready).store(1, std::memory_order_release);
    agent.run();
    return 0;
  } catch (const std::exception& e) {
    if (ch != nullptr) {
      std::snprintf(ch->error, sizeof(ch->error), "%s", e.what());
      std::atomic_ref<std::uint64_t>(ch->failed).store(1, std::memory_order_release);
    }
    std::fprintf(stderr, "nvst-copy-agent: %s\n", e.what());
    return 1;
  }
}

}  // namespace nvst
