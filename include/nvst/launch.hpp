// Starting PEs without an external launcher, the one way this library does
// it: `nvst`, the GPU tests (re-executing themselves) and the host tests'
// harness (running a function in forked children) spawn one process per GPU
// (or per host PE) on this machine, hand each its rank and a fresh unique ID
// through NVST_* variables (the ones base/launch_env.cpp reads, as Python's
// init_with_unique_id sets them), and watch them. If one PE fails, the
// others get a grace period to report it, then are killed: no orphan keeps a
// GPU busy.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace nvst {

struct SpawnOptions {
  int nprocs = 1;
  std::vector<std::string> argv;                         // argv[0] is the program; default: this one
  std::vector<std::pair<std::string, std::string>> env;  // extra variables for every PE
  double grace_seconds = 15;                             // after the first failure, before killing the rest; < 0: never
  // Optional: each PE runs run(rank) in a forked child (no exec) and exits
  // with its result; argv is then unused. For tests that run a function as
  // PEs; programs re-execute themselves (argv), which is safe with threads.
  std::function<int(int rank)> run{};
  double deadline_seconds = 0;  // > 0: every PE still running then is killed
  // Called in the parent as each PE exits, with its wait status (to report
  // it, or to clean up what a killed PE leaves behind).
  std::function<void(int rank, int pid, int status)> on_exit{};
};

// Starts the PEs, each with NVST_UNIQUE_ID (a fresh loopback ID),
// NVST_RANK, NVST_WORLD_SIZE, NVST_LOCAL_RANK and NVST_LOCAL_WORLD_SIZE set
// (a launcher's variables removed), plus options.env; waits for all of them.
// Returns each rank's wait status (as waitpid reports it).
std::vector<int> spawn(const SpawnOptions& options);

// spawn(), printing which rank failed how as it happens. Returns 0 if all
// exited 0, else the first non-zero exit code (128+signal for a signal).
int spawn_and_wait(const SpawnOptions& options);

// True when this process is a PE of a job (NVST_*, torchrun or mpirun).
bool is_pe_process();

}  // namespace nvst
