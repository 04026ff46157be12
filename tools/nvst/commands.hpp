// The `nvst` subcommands other than the benchmarks (bench.hpp).
#pragma once

namespace nvst::tools {

// GPUs, the peer-access/NVLink matrix, transports and versions. Needs no job.
int info();
// Quick end-to-end checks inside a job's PE (nvst spawns the PEs).
int selftest_pe();
// Number of CUDA devices visible (0 where there is no driver or GPU).
int gpu_count();

}  // namespace nvst::tools
