// Errors: one exception type and one family of check macros.
//
// Every CUDA, driver and system call in the library goes through a NVST_CHECK_*
// macro. A failure throws nvst::Error whose message names the call as written
// in the source, this PE's rank, the error, and the file and line, so that a
// log from a 4-process job says which process failed at what.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace nvst {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {
// "[nvst rank 3] " once the rank is known, "[nvst] " before.
std::string rank_prefix();
[[noreturn]] void throw_error(const std::string& message, const char* file, int line);
[[noreturn]] void throw_cuda_error(const char* call, int code, const char* name, const char* text, const char* file,
                                   int line);
[[noreturn]] void throw_errno_error(const char* call, int err, const char* file, int line);

template <typename... Parts>
std::string concat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}
}  // namespace detail
}  // namespace nvst

// NVST_FAIL("heap exhausted: asked ", n, " bytes") throws nvst::Error.
#define NVST_FAIL(...) ::nvst::detail::throw_error(::nvst::detail::concat(__VA_ARGS__), __FILE__, __LINE__)

// NVST_REQUIRE(cond, "message parts"...) validates an argument or invariant.
#define NVST_REQUIRE(cond, ...) \
  do { \
    if (!(cond)) NVST_FAIL(__VA_ARGS__); \
  } while (0)

// System calls that return -1 and set errno.
#define NVST_CHECK_SYS(call) \
  do { \
    if ((call) == -1) ::nvst::detail::throw_errno_error(#call, errno, __FILE__, __LINE__); \
  } while (0)

#ifdef __CUDACC__
#define NVST_CUDA_AVAILABLE 1
#endif
#if defined(NVST_CUDA_AVAILABLE) || defined(CUDART_VERSION) || __has_include(<cuda_runtime_api.h>)
#include <cuda_runtime_api.h>
// CUDA runtime calls.
#define NVST_CHECK_CUDA(call) \
  do { \
    cudaError_t nvst_err_ = (call); \
    if (nvst_err_ != cudaSuccess) \
      ::nvst::detail::throw_cuda_error(#call, static_cast<int>(nvst_err_), cudaGetErrorName(nvst_err_), \
                                       cudaGetErrorString(nvst_err_), __FILE__, __LINE__); \
  } while (0)
// After a kernel launch: the launch error now, not at the next sync.
#define NVST_CHECK_LAUNCH() NVST_CHECK_CUDA(cudaGetLastError())
#endif
