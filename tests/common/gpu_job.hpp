// How the GPU test binaries start: run as a PE when spawned as one, else
// spawn np PEs of this same program, or skip (exit 77, ctest's skip code)
// where too few GPUs are visible.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "nvst/launch.hpp"

namespace nvst::test {

// 77 with a message when fewer than np GPUs are visible (NVST_TEST_SHARE_GPUS=1
// lets several PEs time-share one GPU: correctness only), else 0.
inline int skip_unless_gpus(int np) {
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess) gpus = 0;
  const char* share = std::getenv("NVST_TEST_SHARE_GPUS");
  if (gpus < np && !(share && std::string(share) == "1" && gpus >= 1)) {
    std::printf("SKIP: needs %d GPUs, found %d (NVST_TEST_SHARE_GPUS=1 shares them)\n", np, gpus);
    return 77;
  }
  return 0;
}

// The whole main of a GPU test after its own flags: `pe` inside a PE, else
// np PEs of this program (same arguments), their first failure as exit code.
inline int run_gpu_test(int argc, char** argv, const char* name, int np, const std::function<int()>& pe) {
  try {
    if (nvst::is_pe_process()) {
      // Line by line: a PE that dies keeps the verdicts it printed.
      std::setvbuf(stdout, nullptr, _IOLBF, 0);
      return pe();
    }
    if (int skip = skip_unless_gpus(np)) return skip;
    return nvst::spawn_and_wait({np, std::vector<std::string>(argv, argv + argc), {}, 15});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", name, e.what());
    return 1;
  }
}

}  // namespace nvst::test
