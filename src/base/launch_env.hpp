// Who started this process and where its job's rank 0 listens, read from the
// environment as the launcher left it.
#pragma once

#include <string>

#include "base/bootstrap.hpp"

namespace nvst {

struct LaunchInfo {
  int rank = 0;
  int world = 1;
  int local_rank = 0;
  int local_world = 1;
  UniqueId id;
  std::string launcher;  // "nvst", "torchrun", "mpirun" or "single"
};

// NVST_UNIQUE_ID + NVST_RANK/NVST_WORLD_SIZE[/NVST_LOCAL_RANK/_SIZE] (nvst's
// own spawner and test harness); else torchrun's variables; else Open MPI's;
// else a job of one. Throws naming the variable that is missing or wrong.
LaunchInfo launch_info_from_environment();

// True when one of the launchers above has set this process up (so a tool
// should not spawn PEs itself).
bool launched_by_launcher();

}  // namespace nvst
