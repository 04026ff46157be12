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
#include "base/bootstrap.hpp"
#include "transport/fabric.hpp"

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

inline std::vector<PeResult> run_pes(int n, const std::function<int(int)>& fn, const Env& env = {},
                                     double deadline_s = 45, UniqueId* id_out = nullptr) {
  UniqueId id = UniqueId::create_loopback();
  if (id_out) *id_out = id;
  std::vector<pid_t> pids;
  for (int rank = 0; rank < n; ++rank) {
    pid_t pid = ::fork();
    if (pid == 0) {
      ::setenv("NVST_UNIQUE_ID", id.to_string().c_str(), 1);
      ::setenv("NVST_RANK", std::to_string(rank).c_str(), 1);
      ::setenv("NVST_WORLD_SIZE", std::to_string(n).c_str(), 1);
      ::setenv("NVST_LOCAL_RANK", std::to_string(rank).c_str(), 1);
      ::setenv("NVST_LOCAL_WORLD_SIZE", std::to_string(n).c_str(), 1);
      ::setenv("NVST_HEAP", "host", 1);
      ::setenv("NVST_TIMEOUT_S", "8", 1);
      ::setenv("NVST_SYMMETRIC_SIZE", "16M", 1);
      for (auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
      int code = 1;
      try {
        code = fn(rank);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: uncaught: %s\n", rank, e.what());
        code = 100;
      }
      std::fflush(stdout);
      std::fflush(stderr);
      ::_exit(code);
    }
    pids.push_back(pid);
  }
  std::vector<PeResult> out(static_cast<std::size_t>(n));
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::milliseconds(static_cast<long>(deadline_s * 1000));
  int live = n;
  while (live > 0) {
    for (int r = 0; r < n; ++r) {
      if (pids[static_cast<std::size_t>(r)] <= 0) continue;
      int status = 0;
      if (::waitpid(pids[static_cast<std::size_t>(r)], &status, WNOHANG) ==
          pids[static_cast<std::size_t>(r)]) {
        out[static_cast<std::size_t>(r)].status = status;
        remove_shm_regions_of(pids[static_cast<std::size_t>(r)]);
        pids[static_cast<std::size_t>(r)] = -1;
        --live;
      }
    }
    if (live > 0 && std::chrono::steady_clock::now() > deadline) {
      for (pid_t p : pids)
        if (p > 0) ::kill(p, SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return out;
}

// Asserts inside a child: prints and returns a failure code.
#define PE_EXPECT(cond, ...)                                                    \
  do {                                                                          \
    if (!(cond)) {                                                              \
      std::fprintf(stderr, "PE check failed at %s:%d: %s: %s\n", __FILE__, __LINE__, #cond, \
                   ::nvst::detail::concat(__VA_ARGS__).c_str());               \
      return 1;                                                                 \
    }                                                                           \
  } while (0)

inline bool contains(const std::string& s, const std::string& sub) {
  return s.find(sub) != std::string::npos;
}

}  // namespace nvst::test
