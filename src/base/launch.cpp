#include "nvst/launch.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "nvst/error.hpp"
#include "base/bootstrap.hpp"
#include "base/launch_env.hpp"

namespace nvst {

bool is_pe_process() { return launched_by_launcher(); }

int spawn_and_wait(const SpawnOptions& options) {
  NVST_REQUIRE(options.nprocs >= 1, "spawn: nprocs must be >= 1, got ", options.nprocs);
  std::vector<std::string> argv = options.argv;
  NVST_REQUIRE(!argv.empty(), "spawn: empty argv");
  const UniqueId id = UniqueId::create_loopback();
  const std::string id_text = id.to_string();
  std::vector<pid_t> pids;
  for (int rank = 0; rank < options.nprocs; ++rank) {
    pid_t pid = ::fork();
    NVST_CHECK_SYS(pid);
    if (pid == 0) {
      // Our own variables win over a launcher's the parent may have had.
      for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                            "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"})
        ::unsetenv(v);
      ::setenv("NVST_UNIQUE_ID", id_text.c_str(), 1);
      ::setenv("NVST_RANK", std::to_string(rank).c_str(), 1);
      ::setenv("NVST_WORLD_SIZE", std::to_string(options.nprocs).c_str(), 1);
      ::setenv("NVST_LOCAL_RANK", std::to_string(rank).c_str(), 1);
      ::setenv("NVST_LOCAL_WORLD_SIZE", std::to_string(options.nprocs).c_str(), 1);
      for (auto& [k, v] : options.env) ::setenv(k.c_str(), v.c_str(), 1);
      std::vector<char*> cargv;
      for (auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
      cargv.push_back(nullptr);
      ::execv("/proc/self/exe", cargv.data());
      std::fprintf(stderr, "[nvst] exec of %s failed: %s\n", argv[0].c_str(), std::strerror(errno));
      ::_exit(127);
    }
    pids.push_back(pid);
  }
  int first_failure = 0;
  int live = options.nprocs;
  auto kill_deadline = std::chrono::steady_clock::time_point::max();
  while (live > 0) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid == 0) {
      if (std::chrono::steady_clock::now() > kill_deadline) {
        for (pid_t p : pids)
          if (p > 0) ::kill(p, SIGKILL);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;
    }
    int rank = -1;
    for (int r = 0; r < options.nprocs; ++r)
      if (pids[static_cast<std::size_t>(r)] == pid) rank = r;
    if (rank < 0) continue;
    pids[static_cast<std::size_t>(rank)] = -1;
    --live;
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (code != 0) {
      if (WIFSIGNALED(status))
        std::fprintf(stderr, "[nvst] rank %d was killed by signal %d (%s)\n", rank,
                     WTERMSIG(status), strsignal(WTERMSIG(status)));
      else
        std::fprintf(stderr, "[nvst] rank %d exited with code %d\n", rank, code);
      if (first_failure == 0) {
        first_failure = code;
        kill_deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<long>(options.grace_seconds * 1000));
      }
    }
  }
  return first_failure;
}

}  // namespace nvst
