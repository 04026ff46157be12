// The message of the nvst::Error that a call throws: for tests of argument
// checks, on the host (tests/host) and on GPUs (tests/gpu).
#pragma once

#include <string>

#include "nvst/error.hpp"

namespace nvst::test {

// Runs `f` and returns the nvst::Error message it threw, or "" if none.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const nvst::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace nvst::test
