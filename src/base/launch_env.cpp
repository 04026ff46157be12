#include "base/launch_env.hpp"

#include <climits>
#include <cstdint>

#include "nvst/error.hpp"
#include "base/job_secret.hpp"
#include "nvst/settings.hpp"

namespace nvst {

namespace {

int require_int(const char* name, long lo, long hi) {
  auto v = settings::get_int_in(name, lo, hi);
  NVST_REQUIRE(v.has_value(), name, " is not set (needed with this launcher)");
  return *v;
}

// A local rank and size come as a pair or not at all.
void local_pair(LaunchInfo& l, const char* rank_var, const char* size_var, int rank_default, int size_default) {
  auto lr = settings::get_int_in(rank_var, 0, INT_MAX - 1);
  auto lw = settings::get_int_in(size_var, 1, INT_MAX);
  NVST_REQUIRE(lr.has_value() == lw.has_value(), lr ? rank_var : size_var, " is set but ", lr ? size_var : rank_var,
               " is not (", l.launcher, " launch)");
  l.local_rank = lr.value_or(rank_default);
  l.local_world = lw.value_or(size_default);
}

// torchrun and mpirun hand out no secret. With NVST_COOKIE the job has one;
// otherwise, when every rank runs on this host, rank 0 draws it and passes
// it through a file only this user can read (job_secret.hpp). The file's
// name is made of public values (it is not the secret). Across hosts there
// is no such channel: set NVST_COOKIE, or pass a unique ID (Python:
// nvshmem_tutorial.init through torch.distributed).
void launcher_cookie(LaunchInfo& l, const std::string& job) {
  if (auto c = settings::get("NVST_COOKIE")) {
    NVST_REQUIRE(c->size() == 32 && c->find_first_not_of("0123456789abcdefABCDEF") == std::string::npos,
                 "NVST_COOKIE must be 32 hex digits (for example: openssl rand -hex 16)");
    l.id.cookie = UniqueId::parse("nvst1:x:1:" + *c).cookie;
    return;
  }
  NVST_REQUIRE(l.local_world == l.world, l.launcher, " job across hosts (", l.world, " ranks, ", l.local_world,
               " on this host): set NVST_COOKIE to the same 32 hex digits on every rank (for example "
               "NVST_COOKIE=$(openssl rand -hex 16), exported to every rank), or pass a unique ID (Python: "
               "nvshmem_tutorial.init through torch.distributed)");
  const secret::Cookie public_key{};  // a name from public values, hashed only to make it short
  l.id.cookie_file = secret::private_dir() + "/cookie-" +
                     secret::derived_name(public_key, job + "|" + l.id.host + "|" + std::to_string(l.id.port) + "|" +
                                                          std::to_string(l.world));
}

std::uint16_t bootstrap_port(const char* launcher) {
  if (auto p = settings::get_int_in("NVST_BOOTSTRAP_PORT", 1, 65535)) return static_cast<std::uint16_t>(*p);
  auto mp = settings::get_int_in("MASTER_PORT", 1, 65534);
  NVST_REQUIRE(mp.has_value(), "MASTER_PORT (or NVST_BOOTSTRAP_PORT) is not set (", launcher, " launch)");
  // MASTER_PORT itself belongs to torch's store; ours is the next one.
  return static_cast<std::uint16_t>(*mp + 1);
}

void validate(const LaunchInfo& l) {
  NVST_REQUIRE(l.world >= 1, "world size must be >= 1, got ", l.world, " (", l.launcher, ")");
  NVST_REQUIRE(l.rank >= 0 && l.rank < l.world, "rank ", l.rank, " out of range [0, ", l.world, ") (", l.launcher, ")");
  NVST_REQUIRE(l.local_world >= 1 && l.local_rank >= 0 && l.local_rank < l.local_world, "local rank ", l.local_rank,
               " out of range [0, ", l.local_world, ") (", l.launcher, ")");
  NVST_REQUIRE(l.local_world <= l.world, "local world size ", l.local_world, " exceeds the world size ", l.world, " (",
               l.launcher, ")");
}

}  // namespace

bool launched_by_launcher() {
  return settings::get("NVST_UNIQUE_ID") || settings::get("RANK") || settings::get("WORLD_SIZE") ||
         settings::get("OMPI_COMM_WORLD_RANK") || settings::get("OMPI_COMM_WORLD_SIZE");
}

LaunchInfo launch_info_from_environment() {
  LaunchInfo l;
  std::string job;  // torchrun/mpirun: what names the job (public values)
  const bool torch = settings::get("RANK") || settings::get("WORLD_SIZE");
  const bool mpi = settings::get("OMPI_COMM_WORLD_RANK") || settings::get("OMPI_COMM_WORLD_SIZE");
  if (auto id = settings::get("NVST_UNIQUE_ID")) {
    l.launcher = "nvst";
    l.id = UniqueId::parse(*id);
    l.rank = require_int("NVST_RANK", 0, INT_MAX - 1);
    l.world = require_int("NVST_WORLD_SIZE", 1, INT_MAX);
    l.local_rank = settings::get_int_in("NVST_LOCAL_RANK", 0, INT_MAX - 1).value_or(l.rank);
    l.local_world = settings::get_int_in("NVST_LOCAL_WORLD_SIZE", 1, INT_MAX).value_or(l.world);
  } else if (torch) {
    l.launcher = "torchrun";
    NVST_REQUIRE(!mpi,
                 "both torchrun (RANK/WORLD_SIZE) and mpirun (OMPI_COMM_WORLD_*) variables are set: "
                 "which launcher started this process?");
    l.rank = require_int("RANK", 0, INT_MAX - 1);
    l.world = require_int("WORLD_SIZE", 1, INT_MAX);
    local_pair(l, "LOCAL_RANK", "LOCAL_WORLD_SIZE", l.rank, l.world);
    auto addr = settings::get("NVST_BOOTSTRAP_ADDR");
    if (!addr) addr = settings::get("MASTER_ADDR");
    NVST_REQUIRE(addr.has_value(), "MASTER_ADDR is not set (torchrun launch)");
    l.id.host = *addr;
    l.id.port = bootstrap_port("torchrun");
    job = "torchrun|" + settings::get("TORCHELASTIC_RUN_ID").value_or("") + "|" +
          settings::get("TORCHELASTIC_RESTART_COUNT").value_or("0");
  } else if (mpi) {
    l.launcher = "mpirun";
    l.rank = require_int("OMPI_COMM_WORLD_RANK", 0, INT_MAX - 1);
    l.world = require_int("OMPI_COMM_WORLD_SIZE", 1, INT_MAX);
    local_pair(l, "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", l.rank, l.world);
    auto addr = settings::get("NVST_BOOTSTRAP_ADDR");
    if (!addr) addr = settings::get("MASTER_ADDR");
    NVST_REQUIRE(addr.has_value(),
                 "under mpirun, set the host of rank 0: mpirun -x NVST_BOOTSTRAP_ADDR=<host> "
                 "(or MASTER_ADDR), and optionally NVST_BOOTSTRAP_PORT");
    l.id.host = *addr;
    if (!settings::get("NVST_BOOTSTRAP_PORT") && !settings::get("MASTER_PORT")) {
      l.id.port = 29600;
    } else {
      l.id.port = bootstrap_port("mpirun");
    }
    job = "mpirun|" + settings::get("OMPI_MCA_ess_base_jobid").value_or("");
  } else {
    l.launcher = "single";
    l.id.host = "127.0.0.1";
    l.id.port = 0;  // a job of one never listens
    l.id.cookie = random_cookie();
  }
  validate(l);
  if (!job.empty()) launcher_cookie(l, job);
  return l;
}

}  // namespace nvst
