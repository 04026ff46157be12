#include "nvst/error.hpp"

#include <cstring>
#include <functional>

#include "base/error_hooks.hpp"

namespace nvst::detail {

namespace {
int g_rank = -1;
std::function<std::string()> g_device_error_describer;
}  // namespace

void set_error_rank(int rank) { g_rank = rank; }
void set_device_error_describer(std::function<std::string()> f) { g_device_error_describer = std::move(f); }

std::string rank_prefix() {
  if (g_rank < 0) return "[nvst] ";
  return "[nvst rank " + std::to_string(g_rank) + "] ";
}

void throw_error(const std::string& message, const char* file, int line) {
  throw Error(rank_prefix() + message + " (" + file + ":" + std::to_string(line) + ")");
}

void throw_cuda_error(const char* call, int code, const char* name, const char* text, const char* file, int line) {
  std::string msg = rank_prefix() + call + " failed: " + (name ? name : "?") + " (" + std::to_string(code) +
                    "): " + (text ? text : "?") + " (" + file + ":" + std::to_string(line) + ")";
  if (g_device_error_describer) {
    std::string dev = g_device_error_describer();
    if (!dev.empty()) msg += "\n  device-side cause: " + dev;
  }
  throw Error(msg);
}

void throw_errno_error(const char* call, int err, const char* file, int line) {
  throw Error(rank_prefix() + call + " failed: " + std::strerror(err) + " (errno " + std::to_string(err) + ") (" +
              file + ":" + std::to_string(line) + ")");
}

}  // namespace nvst::detail
