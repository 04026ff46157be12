#include "base/socket.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "nvst/error.hpp"

namespace nvst::net {

Deadline deadline_after(double seconds) {
  return Clock::now() + std::chrono::microseconds(static_cast<long long>(seconds * 1e6));
}

int ms_left(Deadline d) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(d - Clock::now()).count();
  if (left <= 0) return 0;
  return left > 1'000'000'000 ? 1'000'000'000 : static_cast<int>(left);
}

void Fd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

namespace {

sockaddr_in resolve_ipv4(const std::string& host, std::uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &res);
  NVST_REQUIRE(rc == 0 && res != nullptr, "cannot resolve bootstrap host '", host, "': ", ::gai_strerror(rc));
  sockaddr_in addr = *reinterpret_cast<sockaddr_in*>(res->ai_addr);
  ::freeaddrinfo(res);
  addr.sin_port = htons(port);
  return addr;
}

// Lower latency for the small bootstrap messages; an optimisation only, so
// a socket layer without it (seen on Firecracker VMs: EOPNOTSUPP) is fine.
void set_nodelay(int fd) {
  int one = 1;
  if (::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0 && errno != EOPNOTSUPP && errno != ENOPROTOOPT)
    NVST_CHECK_SYS(-1);
}

}  // namespace

Fd listen_tcp(bool loopback_only, std::uint16_t port, std::uint16_t* bound_port) {
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  NVST_CHECK_SYS(fd.get());
  int one = 1;
  NVST_CHECK_SYS(::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(loopback_only ? INADDR_LOOPBACK : INADDR_ANY);
  addr.sin_port = htons(port);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    int err = errno;
    NVST_FAIL("bootstrap root cannot listen on port ", port, ": ", std::strerror(err),
              " (another job on this port? set NVST_BOOTSTRAP_PORT)");
  }
  NVST_CHECK_SYS(::listen(fd.get(), 1024));
  if (bound_port) {
    socklen_t len = sizeof(addr);
    NVST_CHECK_SYS(::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len));
    *bound_port = ntohs(addr.sin_port);
  }
  return fd;
}

Fd connect_tcp(const std::string& host, std::uint16_t port, Deadline deadline) {
  sockaddr_in addr = resolve_ipv4(host, port);
  int last_err = 0;
  while (true) {
    Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    NVST_CHECK_SYS(fd.get());
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
      set_nodelay(fd.get());
      return fd;
    }
    last_err = errno;
    if (last_err != ECONNREFUSED && last_err != ETIMEDOUT && last_err != EHOSTUNREACH && last_err != ENETUNREACH &&
        last_err != EAGAIN && last_err != EINTR)
      NVST_FAIL("cannot connect to bootstrap root ", host, ":", port, ": ", std::strerror(last_err));
    if (Clock::now() >= deadline)
      NVST_FAIL("timed out connecting to bootstrap root ", host, ":", port, " (last error: ", std::strerror(last_err),
                "); is rank 0 running? (NVST_TIMEOUT_S)");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

Fd accept_until(int listen_fd, Deadline deadline) {
  if (wait_readable(listen_fd, deadline) != Io::kOk) return Fd();
  Fd fd(::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC));
  if (!fd.valid()) {
    if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED) return Fd();
    NVST_CHECK_SYS(-1);
  }
  set_nodelay(fd.get());
  return fd;
}

std::uint16_t free_loopback_port() {
  std::uint16_t port = 0;
  Fd fd = listen_tcp(true, 0, &port);
  return port;
}

void send_all(int fd, const void* data, std::size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::send(fd, p, bytes, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EPIPE || errno == ECONNRESET)
        NVST_FAIL("send to a peer failed: the connection was closed (peer died?)");
      NVST_CHECK_SYS(-1);
    }
    p += n;
    bytes -= static_cast<std::size_t>(n);
  }
}

Io wait_readable(int fd, Deadline deadline) {
  while (true) {
    pollfd pfd{fd, POLLIN, 0};
    int rc = ::poll(&pfd, 1, ms_left(deadline));
    if (rc < 0) {
      if (errno == EINTR) continue;
      NVST_CHECK_SYS(-1);
    }
    if (rc == 0) return Io::kTimeout;
    return Io::kOk;
  }
}

Io recv_all(int fd, void* data, std::size_t bytes, Deadline deadline) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    if (wait_readable(fd, deadline) == Io::kTimeout) return Io::kTimeout;
    ssize_t n = ::recv(fd, p, bytes, 0);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      if (errno == ECONNRESET) return Io::kClosed;
      NVST_CHECK_SYS(-1);
    }
    if (n == 0) return Io::kClosed;
    p += n;
    bytes -= static_cast<std::size_t>(n);
  }
  return Io::kOk;
}

Fd listen_unix(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  NVST_REQUIRE(path.size() < sizeof(addr.sun_path), "Unix socket path too long: ", path);
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  ::unlink(path.c_str());
  Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  NVST_CHECK_SYS(fd.get());
  NVST_CHECK_SYS(::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)));
  NVST_CHECK_SYS(::listen(fd.get(), 1024));
  return fd;
}

Fd connect_unix(const std::string& path, Deadline deadline) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  NVST_REQUIRE(path.size() < sizeof(addr.sun_path), "Unix socket path too long: ", path);
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  while (true) {
    Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    NVST_CHECK_SYS(fd.get());
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) return fd;
    int err = errno;
    if (err != ENOENT && err != ECONNREFUSED && err != EAGAIN && err != EINTR)
      NVST_FAIL("cannot connect to node peer socket ", path, ": ", std::strerror(err));
    if (Clock::now() >= deadline)
      NVST_FAIL("timed out connecting to node peer socket ", path, ": ", std::strerror(err));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void send_fd(int sock, int fd_to_send, const void* payload, std::size_t bytes) {
  msghdr msg{};
  iovec iov{const_cast<void*>(payload), bytes};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
  cmsg->cmsg_level = SOL_SOCKET;
  cmsg->cmsg_type = SCM_RIGHTS;
  cmsg->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(cmsg), &fd_to_send, sizeof(int));
  ssize_t n;
  do {
    n = ::sendmsg(sock, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  NVST_CHECK_SYS(n < 0 ? -1 : 0);
  NVST_REQUIRE(static_cast<std::size_t>(n) == bytes, "sendmsg with fd sent ", n, " of ", bytes, " bytes");
}

Io recv_fd(int sock, void* payload, std::size_t bytes, Fd* received, Deadline deadline) {
  if (wait_readable(sock, deadline) == Io::kTimeout) return Io::kTimeout;
  msghdr msg{};
  iovec iov{payload, bytes};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n;
  do {
    n = ::recvmsg(sock, &msg, MSG_WAITALL | MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  NVST_CHECK_SYS(n < 0 ? -1 : 0);
  if (n == 0) return Io::kClosed;
  NVST_REQUIRE(static_cast<std::size_t>(n) == bytes, "short fd message: ", n, " of ", bytes, " bytes");
  cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
  NVST_REQUIRE(cmsg != nullptr && cmsg->cmsg_type == SCM_RIGHTS, "node peer's message carried no file descriptor");
  int fd;
  std::memcpy(&fd, CMSG_DATA(cmsg), sizeof(int));
  *received = Fd(fd);
  return Io::kOk;
}

}  // namespace nvst::net
