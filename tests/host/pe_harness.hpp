// Runs a function as n PEs of one job: forked children of the test process,
// each with the NVST_* variables a launcher would set and host heaps. The
// parent collects each child's wait status, killing stragglers at a deadline
// so a broken runtime fails the test instead of hanging it.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "error_of.hpp"
#include "nvst/error.hpp"
#include "nvst/fabric_info.hpp"
#include "nvst/launch.hpp"

namespace nvst::test {

struct PeResult {
  int status = 0;
  bool exited() const { return WIFEXITED(status); }
  int code() const { return WIFEXITED(status) ? WEXITSTATUS(status) : -1; }
  int signal() const { return WIFSIGNALED(status) ? WTERMSIG(status) : 0; }
};

using Env = std::vector<std::pair<std::string, std::string>>;

// libfabric's shm provider names each endpoint's region /dev/shm/<pid>:...
// and unlinks it only when the endpoint is closed. A PE that was killed, or
// left through _exit() after an error, leaves its 16 MiB behind (270 such
// files once piled up on a CI machine). A later process that gets the same
// pid copes (FabricSetup.StaleShmRegionOfThisPidIsReplaced), but the memory
// stays taken: the parent removes its dead children's regions.
inline void remove_shm_regions_of(pid_t pid) {
  std::error_code ec;
  for (const std::string& p : nvst::fabric::shm_region_paths(pid)) std::filesystem::remove(p, ec);
}

// The library's own spawner (nvst/launch.hpp) with a function instead of a
// program, host heaps and short timeouts, and no grace kill: a test that
// makes one PE fail on purpose waits for the others' own reports.
inline std::vector<PeResult> run_pes(int n, const std::function<int(int)>& fn, const Env& env = {},
                                     double deadline_s = 45) {
  nvst::SpawnOptions options;
  options.nprocs = n;
  options.run = fn;
  options.env = {{"NVST_HEAP", "host"}, {"NVST_TIMEOUT_S", "8"}, {"NVST_SYMMETRIC_SIZE", "16M"}};
  options.env.insert(options.env.end(), env.begin(), env.end());
  options.grace_seconds = -1;
  options.deadline_seconds = deadline_s;
  options.on_exit = [](int, int pid, int) { remove_shm_regions_of(pid); };
  std::vector<PeResult> out;
  for (int status : nvst::spawn(options)) out.push_back({status});
  return out;
}

// Asserts inside a child: prints and returns a failure code.
#define PE_EXPECT(cond, ...) \
  do { \
    if (!(cond)) { \
      std::fprintf(stderr, "PE check failed at %s:%d: %s: %s\n", __FILE__, __LINE__, #cond, \
                   ::nvst::detail::concat(__VA_ARGS__).c_str()); \
      return 1; \
    } \
  } while (0)

inline bool contains(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

}  // namespace nvst::test
