#include "nvst/settings.hpp"

#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>

#include "nvst/error.hpp"

namespace nvst::settings {

namespace {

// strtoull/strtol skip leading blanks and strtoull takes "-1" as 2^64 - 1:
// a value must start with a digit.
bool starts_with_digit(const std::string& v) { return !v.empty() && v[0] >= '0' && v[0] <= '9'; }

}  // namespace

std::optional<std::string> get(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

std::optional<std::size_t> get_size(const char* name) {
  auto v = get(name);
  if (!v) return std::nullopt;
  const char* example = "' is not a size (examples: 4096, 256M, 2G)";
  NVST_REQUIRE(starts_with_digit(*v), name, "='", *v, example);
  char* end = nullptr;
  errno = 0;
  unsigned long long n = std::strtoull(v->c_str(), &end, 10);
  NVST_REQUIRE(errno == 0, name, "='", *v, "' is out of range");
  unsigned long long mul = 1;
  switch (*end) {
    case '\0': break;
    case 'k':
    case 'K':
      mul = 1ull << 10;
      ++end;
      break;
    case 'm':
    case 'M':
      mul = 1ull << 20;
      ++end;
      break;
    case 'g':
    case 'G':
      mul = 1ull << 30;
      ++end;
      break;
    case 't':
    case 'T':
      mul = 1ull << 40;
      ++end;
      break;
    default: NVST_FAIL(name, "='", *v, example);
  }
  if (*end == 'B' || *end == 'b') ++end;
  NVST_REQUIRE(*end == '\0', name, "='", *v, "' has trailing characters");
  NVST_REQUIRE(n <= kMaxSize / mul, name, "='", *v, "' is out of range (at most ", kMaxSize >> 40, "T)");
  return static_cast<std::size_t>(n * mul);
}

std::optional<long> get_int(const char* name) {
  auto v = get(name);
  if (!v) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const bool sign_ok = starts_with_digit(*v) || (v->size() > 1 && (*v)[0] == '-' && starts_with_digit(v->substr(1)));
  long n = sign_ok ? std::strtol(v->c_str(), &end, 10) : 0;
  NVST_REQUIRE(sign_ok && *end == '\0', name, "='", *v, "' is not an integer");
  NVST_REQUIRE(errno == 0, name, "='", *v, "' is out of range");
  return n;
}

std::optional<int> get_int_in(const char* name, long lo, long hi) {
  auto v = get_int(name);
  if (!v) return std::nullopt;
  NVST_REQUIRE(*v >= lo && *v <= hi, name, "='", *get(name), "' is out of range [", lo, ", ", hi, "]");
  return static_cast<int>(*v);
}

std::optional<double> get_double(const char* name) {
  auto v = get(name);
  if (!v) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  double d = std::strtod(v->c_str(), &end);
  NVST_REQUIRE(end != v->c_str() && *end == '\0', name, "='", *v, "' is not a number");
  NVST_REQUIRE(std::isfinite(d) && errno == 0, name, "='", *v, "' is not a finite number");
  return d;
}

namespace {
// Seconds, at most kMaxSeconds: deadlines are computed in microseconds of a
// 64-bit clock, and a larger value (or inf) would wrap to one in the past.
double seconds(const char* name, double fallback, bool zero_ok) {
  const double t = get_double(name).value_or(fallback);
  NVST_REQUIRE(zero_ok ? t >= 0 : t > 0, name, "='", *get(name), "' must be ", zero_ok ? ">= 0" : "> 0",
               zero_ok ? " (0 = no timeout)" : "");
  NVST_REQUIRE(t <= kMaxSeconds, name, "='", *get(name), "' is more than ", kMaxSeconds, " s");
  return t;
}
}  // namespace

double host_timeout_s() { return seconds("NVST_TIMEOUT_S", 120.0, false); }

double device_timeout_s() { return seconds("NVST_DEVICE_TIMEOUT_S", 60.0, true); }

std::size_t heap_bytes(bool host_heap) {
  auto v = get_size("NVST_SYMMETRIC_SIZE");
  if (v) {
    NVST_REQUIRE(*v > 0, "NVST_SYMMETRIC_SIZE='", *get("NVST_SYMMETRIC_SIZE"), "' must be > 0");
    return *v;
  }
  return host_heap ? (std::size_t{256} << 20) : (std::size_t{1} << 30);
}

std::optional<int> node_size() { return get_int_in("NVST_NODE_SIZE", 1, INT_MAX); }

std::size_t coll_workspace_bytes() {
  const std::size_t b = get_size("NVST_COLL_WORKSPACE").value_or(std::size_t{32} << 20);
  // At least 64 KiB: each PE's slot must hold a 16-byte vector per PE of a
  // 64-PE team with room to spare.
  NVST_REQUIRE(b >= (std::size_t{64} << 10) && b % 4096 == 0,
               "NVST_COLL_WORKSPACE must be a multiple of 4096 and at least 64K, got ", b);
  return b;
}

}  // namespace nvst::settings
