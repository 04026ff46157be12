// Memory another process can map too: an anonymous file (memfd) of whole
// pages, mapped shared. The copy agent (transport/copy_agent.hpp) maps the
// proxy's inboxes and its request ring this way, from the descriptor it
// inherits.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <utility>

#include "nvst/error.hpp"

namespace nvst {

class SharedMapping {
 public:
  SharedMapping() = default;
  // A new zeroed region of `bytes` (rounded up to pages), named `name` in
  // /proc/<pid>/fd for whoever looks.
  SharedMapping(const char* name, std::size_t bytes) {
    bytes_ = (bytes + 4095) / 4096 * 4096;
    fd_ = ::memfd_create(name, MFD_CLOEXEC);
    NVST_REQUIRE(fd_ >= 0, "memfd_create(", name, "): ", std::strerror(errno));
    if (::ftruncate(fd_, static_cast<off_t>(bytes_)) != 0) {
      const int err = errno;
      ::close(fd_);
      NVST_FAIL("cannot size shared memory ", name, " to ", bytes_, " bytes: ", std::strerror(err));
    }
    map();
  }
  // Maps `bytes` of an inherited descriptor (the agent's side); takes it.
  static SharedMapping adopt(int fd, std::size_t bytes) {
    SharedMapping m;
    m.fd_ = fd;
    m.bytes_ = bytes;
    m.map();
    return m;
  }
  SharedMapping(SharedMapping&& o) noexcept { *this = std::move(o); }
  SharedMapping& operator=(SharedMapping&& o) noexcept {
    std::swap(fd_, o.fd_);
    std::swap(base_, o.base_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  ~SharedMapping() {
    if (base_) ::munmap(base_, bytes_);
    if (fd_ >= 0) ::close(fd_);
  }

  char* data() const { return static_cast<char*>(base_); }
  std::size_t size() const { return bytes_; }
  int fd() const { return fd_; }

 private:
  void map() {
    void* p = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    NVST_REQUIRE(p != MAP_FAILED, "cannot map ", bytes_, " bytes of shared memory: ", std::strerror(errno));
    base_ = p;
  }
  int fd_ = -1;
  void* base_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace nvst
