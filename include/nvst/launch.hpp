// Starting PEs without an external launcher: `nvst` and the tests spawn one
// process per GPU (or per host PE) on this machine, hand each its rank and a
// fresh unique ID through NVST_* variables, and watch them. If one PE fails,
// the others get a grace period to report it, then are killed: no orphan
// keeps a GPU busy.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace nvst {

struct SpawnOptions {
  int nprocs = 1;
  std::vector<std::string> argv;  // argv[0] is the program; default: this one
  std::vector<std::pair<std::string, std::string>> env;  // extra variables for every PE
  double grace_seconds = 15;  // after the first failure, before killing the rest
};

// Runs the PEs to completion. Returns 0 if all exited 0, else the first
// non-zero exit code (128+signal for a signal), after printing which rank
// failed how.
int spawn_and_wait(const SpawnOptions& options);

// True when this process is a PE of a job (NVST_*, torchrun or mpirun).
bool is_pe_process();

}  // namespace nvst
