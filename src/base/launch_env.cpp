#include "base/launch_env.hpp"

#include <cstdint>

#include "nvst/error.hpp"
#include "nvst/settings.hpp"

namespace nvst {

namespace {

int require_int(const char* name) {
  auto v = settings::get_int(name);
  NVST_REQUIRE(v.has_value(), name, " is not set (needed with this launcher)");
  return static_cast<int>(*v);
}

// Under torchrun or mpirun nobody hands out a secret, so the cookie is
// derived from what every rank of the job sees (FNV-1a over the job's id).
// Set NVST_COOKIE (32 hex digits) to a shared secret to harden it.
std::array<std::uint8_t, 16> derived_cookie(const std::string& seed) {
  if (auto c = settings::get("NVST_COOKIE")) {
    return UniqueId::parse("nvst1:x:1:" + *c).cookie;
  }
  std::array<std::uint8_t, 16> out{};
  std::uint64_t h1 = 1469598103934665603ull, h2 = 1099511628211ull ^ 0x9e3779b97f4a7c15ull;
  for (unsigned char ch : seed) {
    h1 = (h1 ^ ch) * 1099511628211ull;
    h2 = (h2 ^ ch) * 0x100000001b3ull + 0x632be59bd9b4e019ull;
  }
  for (int i = 0; i < 8; ++i) {
    out[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(h1 >> (8 * i));
    out[static_cast<std::size_t>(8 + i)] = static_cast<std::uint8_t>(h2 >> (8 * i));
  }
  return out;
}

std::uint16_t bootstrap_port(const char* launcher) {
  if (auto p = settings::get_int("NVST_BOOTSTRAP_PORT")) {
    NVST_REQUIRE(*p > 0 && *p < 65536, "NVST_BOOTSTRAP_PORT out of range: ", *p);
    return static_cast<std::uint16_t>(*p);
  }
  auto mp = settings::get_int("MASTER_PORT");
  NVST_REQUIRE(mp.has_value(), "MASTER_PORT (or NVST_BOOTSTRAP_PORT) is not set (", launcher,
               " launch)");
  NVST_REQUIRE(*mp > 0 && *mp < 65535, "MASTER_PORT out of range: ", *mp);
  // MASTER_PORT itself belongs to torch's store; ours is the next one.
  return static_cast<std::uint16_t>(*mp + 1);
}

void validate(const LaunchInfo& l) {
  NVST_REQUIRE(l.world >= 1, "world size must be >= 1, got ", l.world, " (", l.launcher, ")");
  NVST_REQUIRE(l.rank >= 0 && l.rank < l.world, "rank ", l.rank, " out of range [0, ", l.world,
               ") (", l.launcher, ")");
  NVST_REQUIRE(l.local_world >= 1 && l.local_rank >= 0 && l.local_rank < l.local_world,
               "local rank ", l.local_rank, " out of range [0, ", l.local_world, ") (",
               l.launcher, ")");
}

}  // namespace

bool launched_by_launcher() {
  return settings::get("NVST_UNIQUE_ID") || (settings::get("RANK") && settings::get("WORLD_SIZE")) ||
         settings::get("OMPI_COMM_WORLD_RANK");
}

LaunchInfo launch_info_from_environment() {
  LaunchInfo l;
  if (auto id = settings::get("NVST_UNIQUE_ID")) {
    l.launcher = "nvst";
    l.id = UniqueId::parse(*id);
    l.rank = require_int("NVST_RANK");
    l.world = require_int("NVST_WORLD_SIZE");
    l.local_rank = static_cast<int>(settings::get_int("NVST_LOCAL_RANK").value_or(l.rank));
    l.local_world = static_cast<int>(settings::get_int("NVST_LOCAL_WORLD_SIZE").value_or(l.world));
  } else if (settings::get("RANK") && settings::get("WORLD_SIZE")) {
    l.launcher = "torchrun";
    l.rank = require_int("RANK");
    l.world = require_int("WORLD_SIZE");
    l.local_rank = static_cast<int>(settings::get_int("LOCAL_RANK").value_or(0));
    l.local_world = static_cast<int>(settings::get_int("LOCAL_WORLD_SIZE").value_or(1));
    auto addr = settings::get("NVST_BOOTSTRAP_ADDR");
    if (!addr) addr = settings::get("MASTER_ADDR");
    NVST_REQUIRE(addr.has_value(), "MASTER_ADDR is not set (torchrun launch)");
    l.id.host = *addr;
    l.id.port = bootstrap_port("torchrun");
    l.id.cookie = derived_cookie(settings::get("TORCHELASTIC_RUN_ID").value_or("") + "|" +
                                 *addr + "|" + std::to_string(l.id.port) + "|" +
                                 std::to_string(l.world));
  } else if (settings::get("OMPI_COMM_WORLD_RANK")) {
    l.launcher = "mpirun";
    l.rank = require_int("OMPI_COMM_WORLD_RANK");
    l.world = require_int("OMPI_COMM_WORLD_SIZE");
    l.local_rank = static_cast<int>(settings::get_int("OMPI_COMM_WORLD_LOCAL_RANK").value_or(0));
    l.local_world = static_cast<int>(settings::get_int("OMPI_COMM_WORLD_LOCAL_SIZE").value_or(1));
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
    l.id.cookie = derived_cookie(settings::get("OMPI_MCA_ess_base_jobid").value_or("") + "|" +
                                 *addr + "|" + std::to_string(l.id.port) + "|" +
                                 std::to_string(l.world));
  } else {
    l.launcher = "single";
    l.id.host = "127.0.0.1";
    l.id.port = 0;  // a job of one never listens
    l.id.cookie = random_cookie();
  }
  validate(l);
  return l;
}

}  // namespace nvst
