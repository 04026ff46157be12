// The proxy's side of the copy agent (copy_agent.hpp): finding and starting
// the agent's program, the request ring, and noticing its death.
#include "transport/copy_agent.hpp"

#include <dlfcn.h>
#include <linux/futex.h>
#include <poll.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>

#include "nvst/error.hpp"
#include "nvst/settings.hpp"

extern char** environ;

namespace nvst {

namespace {

constexpr const char* kProgram = "nvst-copy-agent";

// Where the agent's program is: NVST_COPY_AGENT, else beside the binary or
// shared object that holds this code (build/bin for the tools and tests,
// the package folder for the Python module), else beside the program.
std::string find_program() {
  if (auto set = settings::get("NVST_COPY_AGENT")) {
    NVST_REQUIRE(::access(set->c_str(), X_OK) == 0, "NVST_COPY_AGENT='", *set, "' is not an executable file");
    return *set;
  }
  std::vector<std::filesystem::path> dirs;
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&find_program), &info) != 0 && info.dli_fname)
    dirs.push_back(std::filesystem::path(info.dli_fname).parent_path());
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) dirs.push_back(exe.parent_path());
  std::string looked;
  for (const auto& d : dirs) {
    for (const auto& candidate : {d / kProgram, d / ".." / "bin" / kProgram}) {
      if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
      looked += ' ';
      looked += candidate.string();
    }
  }
  NVST_FAIL("cannot find the copy agent's program (", kProgram, "); looked at", looked,
            ". Set NVST_COPY_AGENT to its path");
}

int pidfd_open(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }

bool exited(int pidfd) {
  pollfd p{pidfd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 1;
}

template <typename T>
T load_acquire(const T& v) {
  return std::atomic_ref<const T>(v).load(std::memory_order_acquire);
}

}  // namespace

CopyAgent::CopyAgent(const HeapShare& heap, const SharedMapping& inboxes, int device, std::uint32_t capacity,
                     int spin_us, double timeout_s) {
  NVST_REQUIRE(capacity > 0 && (capacity & (capacity - 1)) == 0, "copy agent: ring capacity ", capacity,
               " is not a power of two");
  NVST_REQUIRE(heap.cumem_fd >= 0 || heap.ipc, "copy agent: the heap has no handle another process can map");
  channel_mem_ = SharedMapping("nvst-copy-agent-channel", copy_agent::channel_bytes(capacity));
  ch_ = reinterpret_cast<copy_agent::Channel*>(channel_mem_.data());
  ch_->capacity = capacity;
  ring_ = copy_agent::ring(ch_);
  results_ = copy_agent::results(ch_);
  mask_ = capacity - 1;

  char bus[32] = {};
  NVST_CHECK_CUDA(cudaDeviceGetPCIBusId(bus, sizeof(bus), device));
  std::string ipc_hex;
  if (heap.ipc) {
    static const char* digits = "0123456789abcdef";
    for (const unsigned char b : heap.ipc_handle.reserved) {
      ipc_hex += digits[b >> 4];
      ipc_hex += digits[b & 15];
    }
  }
  const std::string program = find_program();
  // The descriptors become 3 (inboxes), 4 (channel) and 5 (heap) in the
  // agent. Through 100+ first, so that one already at 3-5 is not
  // overwritten before it is moved; everything else is closed.
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  const int from[3] = {inboxes.fd(), channel_mem_.fd(), heap.cumem_fd >= 0 ? heap.cumem_fd : inboxes.fd()};
  for (int i = 0; i < 3; ++i) posix_spawn_file_actions_adddup2(&fa, from[i], 100 + i);
  for (int i = 0; i < 3; ++i) posix_spawn_file_actions_adddup2(&fa, 100 + i, 3 + i);
  posix_spawn_file_actions_addclosefrom_np(&fa, 6);
  std::vector<std::string> args = {program,
                                   std::to_string(::getpid()),
                                   bus,
                                   std::to_string(inboxes.size()),
                                   std::to_string(heap.bytes),
                                   heap.ipc ? "ipc:" + ipc_hex : "fd",
                                   std::to_string(spin_us)};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int rc = ::posix_spawn(&pid_, program.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  NVST_REQUIRE(rc == 0, "cannot start the copy agent ", program, ": ", std::strerror(rc));
  pidfd_ = pidfd_open(pid_);
  NVST_REQUIRE(pidfd_ >= 0, "pidfd_open(copy agent ", pid_, "): ", std::strerror(errno));

  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (load_acquire(ch_->ready) == 0) {
    if (load_acquire(ch_->failed) != 0) throw_failure();
    if (exited(pidfd_)) throw_failure();
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid_, SIGKILL);
      NVST_FAIL("the copy agent (pid ", pid_, ", ", program, ") did not start within ", timeout_s,
                " s (NVST_TIMEOUT_S)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

CopyAgent::~CopyAgent() {
  if (pid_ <= 0) return;
  std::atomic_ref<std::uint64_t>(ch_->stop).store(1, std::memory_order_release);
  std::atomic_ref<std::uint32_t>(ch_->bell).fetch_add(1, std::memory_order_seq_cst);
  ::syscall(SYS_futex, &ch_->bell, FUTEX_WAKE, 1, nullptr, nullptr, 0);
  pollfd p{pidfd_, POLLIN, 0};
  if (::poll(&p, 1, 1000) != 1) ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
  ::close(pidfd_);
}

bool CopyAgent::has_room() const { return posted_ - load_acquire(ch_->done) < mask_ + 1; }

std::uint64_t CopyAgent::post(const copy_agent::Request& r) {
  const std::uint64_t n = posted_++;
  copy_agent::Request& slot = ring_[n & mask_];
  slot = r;
  slot.seq = 0;
  std::atomic_ref<std::uint64_t>(slot.seq).store(n + 1, std::memory_order_release);
  std::atomic_ref<std::uint64_t>(ch_->posted).store(n + 1, std::memory_order_seq_cst);
  // Seen asleep after `posted` was stored: the agent re-reads `posted`
  // after it set `sleeping`, so one of the two sees the other.
  if (std::atomic_ref<std::uint32_t>(ch_->sleeping).load(std::memory_order_seq_cst) != 0) {
    std::atomic_ref<std::uint32_t>(ch_->bell).fetch_add(1, std::memory_order_seq_cst);
    ::syscall(SYS_futex, &ch_->bell, FUTEX_WAKE, 1, nullptr, nullptr, 0);
  }
  return n;
}

bool CopyAgent::finished(std::uint64_t n) const {
  if (load_acquire(ch_->done) > n) return true;
  if (load_acquire(ch_->failed) != 0) throw_failure();
  return false;
}

std::uint64_t CopyAgent::result(std::uint64_t n) const { return load_acquire(results_[n & mask_]); }

void CopyAgent::check_alive() const {
  if (load_acquire(ch_->failed) != 0 || exited(pidfd_)) throw_failure();
}

void CopyAgent::throw_failure() const {
  if (load_acquire(ch_->failed) != 0) {
    char why[sizeof(ch_->error) + 1] = {};
    std::memcpy(why, ch_->error, sizeof(ch_->error));
    NVST_FAIL("the copy agent (pid ", pid_, ") failed: ", why);
  }
  int status = 0;
  std::string how = "exited";
  if (::waitpid(pid_, &status, WNOHANG) == pid_) {
    if (WIFSIGNALED(status)) how = detail::concat("was killed by signal ", WTERMSIG(status));
    if (WIFEXITED(status)) how = detail::concat("exited with status ", WEXITSTATUS(status));
  }
  NVST_FAIL("the copy agent (pid ", pid_, ") ", how, "; pieces from other nodes can no longer land in this PE's heap");
}

}  // namespace nvst
