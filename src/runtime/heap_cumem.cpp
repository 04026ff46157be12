// NVLink heap: physical memory from cuMemCreate, exported as a POSIX file
// descriptor, handed to each node peer over a Unix-domain socket
// (SCM_RIGHTS), and mapped by every PE into one virtual window that holds the
// whole node's heaps side by side: node PE i's heap is at window + i*size.
//
// The sockets live in a directory of the job inside /tmp/nvst-<uid> (mode
// 0700, checked to be ours; job_secret.hpp), and every fd message carries
// the job's cookie, so a process of another job or user cannot inject
// memory. Each PE removes its socket once it has every peer's handle, and
// the node's first PE the directory after the last barrier.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include <cuda_runtime_api.h>

#include "nvst/error.hpp"
#include "base/bootstrap.hpp"
#include "runtime/driver_api.hpp"
#include "runtime/heap_backing.hpp"
#include "base/job_secret.hpp"
#include "base/socket.hpp"

namespace nvst {

namespace {

struct FdMessage {
  std::uint8_t cookie[16];
  std::int32_t node_index;
  std::int32_t pad;
  std::uint64_t size;
};

// A directory of this job inside the user's private one. Its name is
// derived from the cookie by a keyed hash, so it reveals nothing of it.
std::string private_dir(const NodeContext& node) {
  std::string dir = secret::private_dir() + "/sockets-" + secret::derived_name(node.cookie, "node sockets");
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    int err = errno;
    NVST_FAIL("cannot create socket directory ", dir, ": ", std::strerror(err));
  }
  return dir;
}

class CuMemHeap final : public HeapBacking {
 public:
  CuMemHeap(std::size_t bytes, const NodeContext& node) : node_(node) {
    const auto& cu = driver::api();
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = node.device;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    std::size_t gran = 0;
    NVST_CHECK_CU(cu.MemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    size_ = (bytes + gran - 1) / gran * gran;
    const int n = static_cast<int>(node.node_pes.size());
    handles_.assign(static_cast<std::size_t>(n), 0);
    mapped_.assign(static_cast<std::size_t>(n), false);

    NVST_CHECK_CU(cu.MemAddressReserve(&window_, size_ * static_cast<std::size_t>(n), gran, 0, 0));
    NVST_CHECK_CU(cu.MemCreate(&handles_[static_cast<std::size_t>(node.node_index)], size_, &prop, 0));
    map(node.node_index);

    // Always, even alone on the node: its barriers are world-collective.
    exchange_fds(cu);
  }

  ~CuMemHeap() override {
    const auto& cu = driver::api();
    for (std::size_t i = 0; i < handles_.size(); ++i) {
      if (mapped_[i]) cu.MemUnmap(window_ + i * size_, size_);
      if (handles_[i]) cu.MemRelease(handles_[i]);
    }
    if (window_) cu.MemAddressFree(window_, size_ * handles_.size());
  }

  char* local_base() const override { return peer_base(node_.node_index); }
  std::size_t size() const override { return size_; }
  char* peer_base(int i) const override {
    if (i < 0 || i >= static_cast<int>(mapped_.size()) || !mapped_[static_cast<std::size_t>(i)]) return nullptr;
    return reinterpret_cast<char*>(window_ + static_cast<std::size_t>(i) * size_);
  }
  bool on_device() const override { return true; }
  HeapShare share() const override {
    int fd = -1;
    NVST_CHECK_CU(driver::api().MemExportToShareableHandle(&fd, handles_[static_cast<std::size_t>(node_.node_index)],
                                                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    HeapShare s;
    s.cumem_fd = fd;
    s.bytes = size_;
    return s;
  }

 private:
  void map(int i) {
    const auto& cu = driver::api();
    CUdeviceptr at = window_ + static_cast<std::size_t>(i) * size_;
    NVST_CHECK_CU(cu.MemMap(at, size_, 0, handles_[static_cast<std::size_t>(i)], 0));
    mapped_[static_cast<std::size_t>(i)] = true;
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = node_.device;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    NVST_CHECK_CU(cu.MemSetAccess(at, size_, &access, 1));
  }

  void exchange_fds(const driver::Api& cu) {
    const int n = static_cast<int>(node_.node_pes.size());
    std::string dir = private_dir(node_);
    auto path_of = [&](int i) {
      return dir + "/pe" + std::to_string(node_.node_pes[static_cast<std::size_t>(i)]) + ".sock";
    };
    net::Fd listener = net::listen_unix(path_of(node_.node_index));
    node_.bootstrap->barrier("heap fd exchange: sockets ready");

    int fd_raw = -1;
    NVST_CHECK_CU(cu.MemExportToShareableHandle(&fd_raw, handles_[static_cast<std::size_t>(node_.node_index)],
                                                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    net::Fd my_fd(fd_raw);
    auto deadline = net::deadline_after(node_.timeout_s);
    FdMessage msg{};
    std::memcpy(msg.cookie, node_.cookie.data(), 16);
    msg.node_index = node_.node_index;
    msg.size = size_;
    // Sending never blocks on the receiver: the message is small and the
    // listener's backlog holds the connection until it accepts.
    for (int i = 0; i < n; ++i) {
      if (i == node_.node_index) continue;
      net::Fd s = net::connect_unix(path_of(i), deadline);
      net::send_fd(s.get(), my_fd.get(), &msg, sizeof(msg));
    }
    for (int received = 0; received < n - 1; ++received) {
      net::Fd conn = net::accept_until(listener.get(), deadline);
      NVST_REQUIRE(conn.valid(), "timed out after ", node_.timeout_s, " s waiting for node peers' heap handles (",
                   received, " of ", n - 1, " received)");
      FdMessage in{};
      net::Fd peer_fd;
      net::Io io = net::recv_fd(conn.get(), &in, sizeof(in), &peer_fd, deadline);
      NVST_REQUIRE(io == net::Io::kOk, "node peer closed its socket before sending its heap");
      NVST_REQUIRE(std::memcmp(in.cookie, node_.cookie.data(), 16) == 0,
                   "heap handle from a process outside this job (wrong cookie) refused");
      NVST_REQUIRE(in.node_index >= 0 && in.node_index < n && in.node_index != node_.node_index &&
                       handles_[static_cast<std::size_t>(in.node_index)] == 0,
                   "heap handle with a bad or repeated node index ", in.node_index);
      NVST_REQUIRE(in.size == size_, "node PE ", node_.node_pes[static_cast<std::size_t>(in.node_index)],
                   " has a heap of ", in.size, " bytes, this PE ", size_, " (NVST_SYMMETRIC_SIZE must agree)");
      NVST_CHECK_CU(cu.MemImportFromShareableHandle(&handles_[static_cast<std::size_t>(in.node_index)],
                                                    reinterpret_cast<void*>(static_cast<std::uintptr_t>(peer_fd.get())),
                                                    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
      map(in.node_index);
    }
    listener.reset();
    ::unlink(path_of(node_.node_index).c_str());  // every peer has connected to it
    node_.bootstrap->barrier("heap fd exchange: mapped");
    if (node_.node_index == 0) ::rmdir(dir.c_str());  // every socket in it is gone
  }

  NodeContext node_;
  std::size_t size_ = 0;
  CUdeviceptr window_ = 0;
  std::vector<CUmemGenericAllocationHandle> handles_;
  std::vector<bool> mapped_;
};

}  // namespace

std::unique_ptr<HeapBacking> make_cumem_heap(std::size_t bytes, const NodeContext& node) {
  return std::make_unique<CuMemHeap>(bytes, node);
}

}  // namespace nvst
