// Thin, checked wrappers over TCP and Unix-domain sockets for the bootstrap
// and for handing heap file descriptors to node peers. Every blocking call
// takes a deadline; none waits forever.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

namespace nvst::net {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

Deadline deadline_after(double seconds);
// Milliseconds left, for poll(); 0 once passed.
int ms_left(Deadline d);

// An owned file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() { return std::exchange(fd_, -1); }
  void reset();

 private:
  int fd_ = -1;
};

// Result of a receive that may meet the peer's end of stream.
enum class Io { kOk, kClosed, kTimeout };

// TCP. listen_tcp(loopback_only, port): port 0 picks one; returns the port.
Fd listen_tcp(bool loopback_only, std::uint16_t port, std::uint16_t* bound_port);
// Connects, retrying refused connections until the deadline (the listener
// may not be up yet). Throws with the address on timeout.
Fd connect_tcp(const std::string& host, std::uint16_t port, Deadline deadline);
// Accepts one connection; invalid Fd on timeout.
Fd accept_until(int listen_fd, Deadline deadline);
// A free TCP port on the loopback interface (for launchers).
std::uint16_t free_loopback_port();

void send_all(int fd, const void* data, std::size_t bytes);
Io recv_all(int fd, void* data, std::size_t bytes, Deadline deadline);
// Waits until fd is readable (or closed): kOk, or kTimeout.
Io wait_readable(int fd, Deadline deadline);

// Unix-domain sockets with SCM_RIGHTS.
Fd listen_unix(const std::string& path);
Fd connect_unix(const std::string& path, Deadline deadline);
// Sends `bytes` of payload with one file descriptor attached.
void send_fd(int sock, int fd_to_send, const void* payload, std::size_t bytes);
// Receives payload and the attached descriptor; throws if none came.
Io recv_fd(int sock, void* payload, std::size_t bytes, Fd* received, Deadline deadline);

}  // namespace nvst::net
