#include "base/job_secret.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

#include "nvst/error.hpp"
#include "base/bootstrap.hpp"

namespace nvst::secret {

namespace {

std::uint64_t rotl(std::uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

void sip_round(std::uint64_t& v0, std::uint64_t& v1, std::uint64_t& v2, std::uint64_t& v3) {
  v0 += v1;
  v1 = rotl(v1, 13);
  v1 ^= v0;
  v0 = rotl(v0, 32);
  v2 += v3;
  v3 = rotl(v3, 16);
  v3 ^= v2;
  v0 += v3;
  v3 = rotl(v3, 21);
  v3 ^= v0;
  v2 += v1;
  v1 = rotl(v1, 17);
  v1 ^= v2;
  v2 = rotl(v2, 32);
}

std::uint64_t le64(const std::uint8_t* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

std::string to_hex(const std::uint8_t* p, std::size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (std::size_t i = 0; i < n; ++i) {
    s += digits[p[i] >> 4];
    s += digits[p[i] & 15];
  }
  return s;
}

std::uint64_t derive(const Cookie& key, std::string_view label) {
  const std::uint64_t k0 = le64(key.data()), k1 = le64(key.data() + 8);
  std::uint64_t v0 = k0 ^ 0x736f6d6570736575ull, v1 = k1 ^ 0x646f72616e646f6dull;
  std::uint64_t v2 = k0 ^ 0x6c7967656e657261ull, v3 = k1 ^ 0x7465646279746573ull;
  const auto* in = reinterpret_cast<const std::uint8_t*>(label.data());
  const std::size_t n = label.size();
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const std::uint64_t m = le64(in + i);
    v3 ^= m;
    sip_round(v0, v1, v2, v3);
    sip_round(v0, v1, v2, v3);
    v0 ^= m;
  }
  std::uint8_t last[8] = {};
  std::memcpy(last, in + i, n - i);
  last[7] = static_cast<std::uint8_t>(n);
  const std::uint64_t m = le64(last);
  v3 ^= m;
  sip_round(v0, v1, v2, v3);
  sip_round(v0, v1, v2, v3);
  v0 ^= m;
  v2 ^= 0xff;
  for (int r = 0; r < 4; ++r) sip_round(v0, v1, v2, v3);
  return v0 ^ v1 ^ v2 ^ v3;
}

std::string derived_name(const Cookie& key, std::string_view label) {
  const std::uint64_t v = derive(key, label);
  std::uint8_t b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<std::uint8_t>(v >> (8 * i));
  return to_hex(b, 8);
}

std::string private_dir() {
  const std::string dir = "/tmp/nvst-" + std::to_string(::getuid());
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    const int err = errno;
    NVST_FAIL("cannot create the private directory ", dir, ": ", std::strerror(err));
  }
  struct stat st{};
  NVST_CHECK_SYS(::lstat(dir.c_str(), &st));
  NVST_REQUIRE(S_ISDIR(st.st_mode) && st.st_uid == ::getuid() && (st.st_mode & 077) == 0, dir,
               " is not a private directory owned by this user (mode must be 0700); remove it");
  return dir;
}

Cookie publish_cookie(const std::string& path) {
  const Cookie c = random_cookie();
  const std::string tmp = path + "." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  NVST_REQUIRE(fd >= 0, "cannot write the job's cookie file ", tmp, ": ", std::strerror(errno));
  const std::string text = to_hex(c.data(), c.size());
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  NVST_REQUIRE(ok && ::rename(tmp.c_str(), path.c_str()) == 0, "cannot write the job's cookie file ", path, ": ",
               std::strerror(errno));
  return c;
}

Cookie read_cookie(const std::string& path, net::Deadline deadline) {
  for (;;) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd >= 0) {
      char text[33] = {};
      const ssize_t n = ::read(fd, text, 32);
      struct stat st{};
      const bool mine = ::fstat(fd, &st) == 0 && st.st_uid == ::getuid() && (st.st_mode & 077) == 0;
      ::close(fd);
      NVST_REQUIRE(mine, "the job's cookie file ", path, " is not private to this user; remove it");
      if (n == 32) return UniqueId::parse("nvst1:x:1:" + std::string(text)).cookie;
    }
    NVST_REQUIRE(net::Clock::now() < deadline, "timed out waiting for rank 0 to publish the job's cookie in ", path,
                 " (is rank 0 running on this host? NVST_TIMEOUT_S)");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace nvst::secret
