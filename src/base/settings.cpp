#include "nvst/settings.hpp"

#include <cerrno>
#include <cstdlib>

#include "nvst/error.hpp"

namespace nvst::settings {

std::optional<std::string> get(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

std::optional<std::size_t> get_size(const char* name) {
  auto v = get(name);
  if (!v) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  unsigned long long n = std::strtoull(v->c_str(), &end, 10);
  NVST_REQUIRE(end != v->c_str() && errno == 0, name, "='", *v,
               "' is not a size (examples: 4096, 256M, 2G)");
  unsigned long long mul = 1;
  switch (*end) {
    case '\0': break;
    case 'k': case 'K': mul = 1ull << 10; ++end; break;
    case 'm': case 'M': mul = 1ull << 20; ++end; break;
    case 'g': case 'G': mul = 1ull << 30; ++end; break;
    default: NVST_FAIL(name, "='", *v, "' is not a size (examples: 4096, 256M, 2G)");
  }
  if (*end == 'B' || *end == 'b') ++end;
  NVST_REQUIRE(*end == '\0', name, "='", *v, "' has trailing characters");
  return static_cast<std::size_t>(n * mul);
}

std::optional<long> get_int(const char* name) {
  auto v = get(name);
  if (!v) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  long n = std::strtol(v->c_str(), &end, 10);
  NVST_REQUIRE(end != v->c_str() && *end == '\0' && errno == 0, name, "='", *v,
               "' is not an integer");
  return n;
}

std::optional<double> get_double(const char* name) {
  auto v = get(name);
  if (!v) return std::nullopt;
  char* end = nullptr;
  double d = std::strtod(v->c_str(), &end);
  NVST_REQUIRE(end != v->c_str() && *end == '\0', name, "='", *v, "' is not a number");
  return d;
}

double host_timeout_s() {
  double t = get_double("NVST_TIMEOUT_S").value_or(120.0);
  NVST_REQUIRE(t > 0, "NVST_TIMEOUT_S must be > 0, got ", t);
  return t;
}

double device_timeout_s() {
  double t = get_double("NVST_DEVICE_TIMEOUT_S").value_or(60.0);
  NVST_REQUIRE(t >= 0, "NVST_DEVICE_TIMEOUT_S must be >= 0 (0 = no timeout), got ", t);
  return t;
}

std::size_t heap_bytes(bool host_heap) {
  auto v = get_size("NVST_SYMMETRIC_SIZE");
  if (v) {
    NVST_REQUIRE(*v > 0, "NVST_SYMMETRIC_SIZE must be > 0");
    return *v;
  }
  return host_heap ? (std::size_t{256} << 20) : (std::size_t{1} << 30);
}

std::optional<int> node_size() {
  auto v = get_int("NVST_NODE_SIZE");
  if (!v) return std::nullopt;
  NVST_REQUIRE(*v >= 1, "NVST_NODE_SIZE must be >= 1, got ", *v);
  return static_cast<int>(*v);
}

std::size_t coll_workspace_bytes() {
  const std::size_t b = get_size("NVST_COLL_WORKSPACE").value_or(std::size_t{32} << 20);
  // At least 64 KiB: each PE's slot must hold a 16-byte vector per PE of a
  // 64-PE team with room to spare.
  NVST_REQUIRE(b >= (std::size_t{64} << 10) && b % 4096 == 0,
               "NVST_COLL_WORKSPACE must be a multiple of 4096 and at least 64K, got ", b);
  return b;
}

}  // namespace nvst::settings
