#include "nvst/launch.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "nvst/error.hpp"
#include "base/bootstrap.hpp"
#include "base/launch_env.hpp"

namespace nvst {

bool is_pe_process() { return launched_by_launcher(); }

namespace {

// The child's side: the job's variables (ours win over a launcher's the
// parent may have had), then either the function or this program again.
[[noreturn]] void become_pe(const SpawnOptions& options, const std::vector<std::string>& argv, const std::string& id,
                            int rank) {
  for (const char* v :
       {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"})
    ::unsetenv(v);
  ::setenv("NVST_UNIQUE_ID", id.c_str(), 1);
  ::setenv("NVST_RANK", std::to_string(rank).c_str(), 1);
  ::setenv("NVST_WORLD_SIZE", std::to_string(options.nprocs).c_str(), 1);
  ::setenv("NVST_LOCAL_RANK", std::to_string(rank).c_str(), 1);
  ::setenv("NVST_LOCAL_WORLD_SIZE", std::to_string(options.nprocs).c_str(), 1);
  for (auto& [k, v] : options.env) ::setenv(k.c_str(), v.c_str(), 1);
  if (options.run) {
    int code = 1;
    try {
      code = options.run(rank);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "[nvst] rank %d: uncaught: %s\n", rank, e.what());
      code = 100;
    }
    std::fflush(stdout);
    std::fflush(stderr);
    ::_exit(code);
  }
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  ::execv("/proc/self/exe", cargv.data());
  std::fprintf(stderr, "[nvst] exec of %s failed: %s\n", argv[0].c_str(), std::strerror(errno));
  ::_exit(127);
}

// This process's own arguments, for SpawnOptions::argv's default.
std::vector<std::string> own_argv() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> argv;
  for (std::string arg; std::getline(in, arg, '\0');) argv.push_back(arg);
  NVST_REQUIRE(!argv.empty(), "spawn: cannot read /proc/self/cmdline for this program's arguments");
  return argv;
}

int exit_code(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

}  // namespace

std::vector<int> spawn(const SpawnOptions& options) {
  NVST_REQUIRE(options.nprocs >= 1, "spawn: nprocs must be >= 1, got ", options.nprocs);
  NVST_REQUIRE(options.deadline_seconds >= 0, "spawn: deadline_seconds must be >= 0, got ", options.deadline_seconds);
  const std::vector<std::string> argv = options.run || !options.argv.empty() ? options.argv : own_argv();
  const std::string id = UniqueId::create_loopback().to_string();
  std::fflush(stdout);  // a forked child would write the parent's buffered output again
  std::fflush(stderr);
  std::vector<pid_t> pids;
  for (int rank = 0; rank < options.nprocs; ++rank) {
    pid_t pid = ::fork();
    if (pid < 0) {
      const int err = errno;
      for (pid_t p : pids) ::kill(p, SIGKILL);
      for (pid_t p : pids) ::waitpid(p, nullptr, 0);
      NVST_FAIL("spawn: fork of rank ", rank, " failed: ", std::strerror(err));
    }
    if (pid == 0) become_pe(options, argv, id, rank);
    pids.push_back(pid);
  }
  using clock = std::chrono::steady_clock;
  auto to_duration = [](double s) { return std::chrono::milliseconds(static_cast<long>(s * 1000)); };
  const auto never = clock::time_point::max();
  const auto deadline = options.deadline_seconds > 0 ? clock::now() + to_duration(options.deadline_seconds) : never;
  auto kill_at = deadline;
  std::vector<int> status(static_cast<std::size_t>(options.nprocs), 0);
  int live = options.nprocs;
  // Each PE by its pid: the caller's other children are none of ours to reap.
  while (live > 0) {
    for (int rank = 0; rank < options.nprocs; ++rank) {
      const pid_t pid = pids[static_cast<std::size_t>(rank)];
      int st = 0;
      if (pid <= 0) continue;
      const pid_t got = ::waitpid(pid, &st, WNOHANG);
      if (got == 0 || (got < 0 && errno == EINTR)) continue;
      if (got < 0) st = W_EXITCODE(127, 0);  // reaped by someone else: its status is lost
      pids[static_cast<std::size_t>(rank)] = -1;
      status[static_cast<std::size_t>(rank)] = st;
      --live;
      if (options.on_exit) options.on_exit(rank, pid, st);
      if (exit_code(st) != 0 && options.grace_seconds >= 0)
        kill_at = std::min(kill_at, clock::now() + to_duration(options.grace_seconds));
    }
    if (live > 0 && clock::now() > kill_at)
      for (pid_t p : pids)
        if (p > 0) ::kill(p, SIGKILL);
    if (live > 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return status;
}

int spawn_and_wait(const SpawnOptions& options) {
  int first_failure = 0;
  SpawnOptions reporting = options;
  reporting.on_exit = [&](int rank, int pid, int st) {
    if (options.on_exit) options.on_exit(rank, pid, st);
    const int code = exit_code(st);
    if (code == 0) return;
    if (WIFSIGNALED(st))
      std::fprintf(stderr, "[nvst] rank %d was killed by signal %d (%s)\n", rank, WTERMSIG(st),
                   strsignal(WTERMSIG(st)));
    else
      std::fprintf(stderr, "[nvst] rank %d exited with code %d\n", rank, code);
    if (first_failure == 0) first_failure = code;
  };
  spawn(reporting);
  return first_failure;
}

}  // namespace nvst
