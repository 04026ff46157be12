// The attack set, on host-memory PEs over loopback: what strangers who
// reach the job's ports can try, what a careless user can set, and PEs that
// die in every phase. Each case ends in a clear error or a correct result,
// bounded in time (docs/failure-and-security.md says what is promised).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <thread>
#include <vector>

#include "nvst/coll.hpp"
#include "nvst/nvst.hpp"
#include "pe_harness.hpp"
#include "base/bootstrap.hpp"
#include "base/launch_env.hpp"
#include "runtime/runtime_internal.hpp"
#include "nvst/settings.hpp"

using namespace nvst::test;
using nvst::Bootstrap;
using nvst::UniqueId;

namespace {

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int connect_loopback(std::uint16_t port) {
  for (int i = 0; i < 400; ++i) {
    int s = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) return s;
    ::close(s);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return -1;
}

// ---- environment -----------------------------------------------------------

TEST(Adversarial, EnvironmentValuesAreRangeChecked) {
  struct Case {
    const char* var;
    const char* value;
    const char* want;
  };
  const Case cases[] = {
      {"NVST_TIMEOUT_S", "inf", "NVST_TIMEOUT_S='inf' is not a finite number"},
      {"NVST_TIMEOUT_S", "nan", "NVST_TIMEOUT_S='nan' is not a finite number"},
      {"NVST_TIMEOUT_S", "1e10", "NVST_TIMEOUT_S='1e10' is more than"},
      {"NVST_TIMEOUT_S", "-3", "NVST_TIMEOUT_S='-3' must be > 0"},
      {"NVST_DEVICE_TIMEOUT_S", "1e300", "NVST_DEVICE_TIMEOUT_S='1e300' is more than"},
      {"NVST_SYMMETRIC_SIZE", "17179869185G", "NVST_SYMMETRIC_SIZE='17179869185G' is out of range"},
      {"NVST_SYMMETRIC_SIZE", "-1", "NVST_SYMMETRIC_SIZE='-1' is not a size"},
      {"NVST_SYMMETRIC_SIZE", " 16M", "NVST_SYMMETRIC_SIZE=' 16M' is not a size"},
      {"NVST_SYMMETRIC_SIZE", "99999999999999999999", "NVST_SYMMETRIC_SIZE='99999999999999999999' is out of range"},
      {"NVST_NODE_SIZE", "4294967297", "NVST_NODE_SIZE='4294967297' is out of range"},
      {"NVST_RANK", "4294967297", "NVST_RANK='4294967297' is out of range"},
      {"NVST_RANK", "-1", "NVST_RANK='-1' is out of range"},
      {"NVST_WORLD_SIZE", "1x", "NVST_WORLD_SIZE='1x' is not an integer"},
  };
  for (const Case& c : cases) {
    auto res = run_pes(1,
                       [&c](int) {
                         std::string msg = error_of([] {
                           nvst::settings::host_timeout_s();
                           nvst::settings::device_timeout_s();
                           nvst::settings::heap_bytes(true);
                           nvst::settings::node_size();
                           nvst::launch_info_from_environment();
                         });
                         PE_EXPECT(contains(msg, c.want), c.var, "=", c.value, " -> '", msg, "'");
                         return 0;
                       },
                       {{c.var, c.value}});
    EXPECT_EQ(res[0].code(), 0) << c.var << "=" << c.value;
  }
}

TEST(Adversarial, InconsistentLauncherVariablesAreRefused) {
  auto res = run_pes(1, [](int) {
    ::unsetenv("NVST_UNIQUE_ID");
    ::setenv("RANK", "1", 1);  // torchrun's rank without its world size
    std::string msg = error_of([] { nvst::launch_info_from_environment(); });
    PE_EXPECT(contains(msg, "WORLD_SIZE is not set"), msg);
    PE_EXPECT(nvst::launched_by_launcher(), "a lone RANK must not read as a job of one");
    ::setenv("WORLD_SIZE", "2", 1);
    ::setenv("MASTER_ADDR", "127.0.0.1", 1);
    ::setenv("MASTER_PORT", "29500", 1);
    ::setenv("OMPI_COMM_WORLD_RANK", "0", 1);
    msg = error_of([] { nvst::launch_info_from_environment(); });
    PE_EXPECT(contains(msg, "both torchrun"), msg);
    ::unsetenv("OMPI_COMM_WORLD_RANK");
    ::setenv("LOCAL_RANK", "0", 1);
    msg = error_of([] { nvst::launch_info_from_environment(); });
    PE_EXPECT(contains(msg, "LOCAL_RANK is set but LOCAL_WORLD_SIZE is not"), msg);
    ::setenv("LOCAL_WORLD_SIZE", "4", 1);
    msg = error_of([] { nvst::launch_info_from_environment(); });
    PE_EXPECT(contains(msg, "local world size 4 exceeds the world size 2"), msg);
    ::setenv("NVST_COOKIE", "abc", 1);
    ::setenv("LOCAL_WORLD_SIZE", "1", 1);
    msg = error_of([] { nvst::launch_info_from_environment(); });
    PE_EXPECT(contains(msg, "NVST_COOKIE must be 32 hex digits"), msg);
    return 0;
  });
  EXPECT_EQ(res[0].code(), 0);
}

// ---- the cookie ------------------------------------------------------------

// Two torchrun jobs with the same public values (address, port, world size,
// run id) get different cookies, and neither leaves its cookie file behind.
TEST(Adversarial, TorchrunCookieIsRandomPerJobAndItsFileIsRemoved) {
  const std::uint16_t master = nvst::net::free_loopback_port();
  std::vector<std::string> cookies;
  for (int job = 0; job < 2; ++job) {
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    auto res = run_pes(2, [&](int rank) {
      for (const char* v :
           {"NVST_UNIQUE_ID", "NVST_RANK", "NVST_WORLD_SIZE", "NVST_LOCAL_RANK", "NVST_LOCAL_WORLD_SIZE"})
        ::unsetenv(v);
      ::setenv("RANK", std::to_string(rank).c_str(), 1);
      ::setenv("WORLD_SIZE", "2", 1);
      ::setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
      ::setenv("LOCAL_WORLD_SIZE", "2", 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1);
      ::setenv("MASTER_PORT", std::to_string(master).c_str(), 1);
      ::setenv("TORCHELASTIC_RUN_ID", "none", 1);
      nvst::LaunchInfo l = nvst::launch_info_from_environment();
      PE_EXPECT(!l.id.cookie_file.empty(), "a one-host torchrun job passes its cookie by file");
      Bootstrap b(l.id, l.rank, l.world, 8.0);
      b.barrier("joined");
      PE_EXPECT(!std::filesystem::exists(l.id.cookie_file), "cookie file ", l.id.cookie_file, " outlived the join");
      if (rank == 0) {
        const auto& c = b.cookie();
        PE_EXPECT(::write(fds[1], c.data(), c.size()) == 16, "pipe");
      }
      b.stop_watch();
      b.barrier("done");
      return 0;
    });
    ::close(fds[1]);
    std::string c(16, '\0');
    EXPECT_EQ(::read(fds[0], c.data(), 16), 16);
    ::close(fds[0]);
    cookies.push_back(c);
    for (int r = 0; r < 2; ++r) EXPECT_EQ(res[r].code(), 0) << "job " << job << " rank " << r;
  }
  EXPECT_NE(cookies[0], cookies[1]) << "two jobs with the same public values got the same cookie";
}

// ---- the bootstrap port ------------------------------------------------------

// 30 idle strangers and a few that send garbage connect before the ranks:
// the ranks still join at once, and every stranger is refused.
TEST(Adversarial, IdleAndGarbageConnectionsDoNotStallInit) {
  UniqueId id = UniqueId::create_loopback();
  pid_t root = ::fork();
  if (root == 0) {
    int code = 0;
    try {
      Bootstrap b(id, 0, 3, 20.0);
      b.barrier("job");
      b.stop_watch();
      b.barrier("end");
    } catch (const std::exception& e) {
      std::fprintf(stderr, "root: %s\n", e.what());
      code = 2;
    }
    ::_exit(code);
  }
  std::vector<int> strangers;
  for (int i = 0; i < 30; ++i) strangers.push_back(connect_loopback(id.port));
  for (int i = 0; i < 5; ++i) {
    int s = connect_loopback(id.port);
    std::vector<char> junk(static_cast<std::size_t>(7 + 13 * i), static_cast<char>(0x5a + i));
    EXPECT_GT(::send(s, junk.data(), junk.size(), MSG_NOSIGNAL), 0);
    strangers.push_back(s);
  }
  for (int s : strangers) ASSERT_GE(s, 0);
  const auto t0 = std::chrono::steady_clock::now();
  auto res = [&] {
    std::vector<pid_t> kids;
    for (int rank : {1, 2}) {
      pid_t p = ::fork();
      if (p == 0) {
        int code = 0;
        try {
          Bootstrap b(id, rank, 3, 20.0);
          b.barrier("job");
          b.stop_watch();
          b.barrier("end");
        } catch (const std::exception& e) {
          std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
          code = 2;
        }
        ::_exit(code);
      }
      kids.push_back(p);
    }
    int bad = 0;
    for (pid_t p : kids) {
      int st = 0;
      ::waitpid(p, &st, 0);
      bad += !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    return bad;
  }();
  const double dt = since(t0);
  int st = 0;
  ::waitpid(root, &st, 0);
  EXPECT_EQ(res, 0);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
  EXPECT_LT(dt, 2.0) << "the ranks took " << dt << " s to join past 35 strangers";
  for (int s : strangers) {
    char c;
    pollfd p{s, POLLIN, 0};
    ::poll(&p, 1, 0);
    EXPECT_LE(::recv(s, &c, 1, MSG_DONTWAIT), 0) << "a stranger was answered";
    ::close(s);
  }
}

// ---- bad arguments and mismatched operations ------------------------------------

TEST(Adversarial, MismatchedBootstrapOperationsNameBoth) {
  auto res = run_pes(3, [](int rank) {
    nvst::init();
    // One barrier too many on PE 1: it pairs with the others' finalize (whose
    // first step is a barrier_all), and then PE 1's finalize meets theirs.
    if (rank == 1) nvst::barrier_all();
    std::string msg = error_of([] { nvst::finalize(); });
    PE_EXPECT(contains(msg, "'barrier_all'") && contains(msg, "'finalize'"), msg);
    return 0;
  });
  for (int r = 0; r < 3; ++r) EXPECT_EQ(res[r].code(), 0) << "rank " << r;
}

TEST(Adversarial, BadArgumentsAreErrorsNotCrashes) {
  auto res = run_pes(2, [](int) {
    nvst::init();
    std::string msg = error_of([] { nvst::bootstrap_broadcast(nullptr, 8, 0); });
    PE_EXPECT(contains(msg, "null data"), msg);
    nvst::finalize();
    nvst::init();
    auto* sig = static_cast<std::uint64_t*>(nvst::calloc(1, 8));
    msg = error_of([&] { nvst::signal_wait_until(sig, static_cast<nvst::Cmp>(77), 0); });
    PE_EXPECT(contains(msg, "comparison 77"), msg);
    nvst::finalize();
    msg = error_of([] { nvst::barrier_all(); });
    PE_EXPECT(contains(msg, "after nvst::finalize()"), msg);
    return 0;
  });
  for (int r = 0; r < 2; ++r) EXPECT_EQ(res[r].code(), 0) << "rank " << r;
}

// Collectives whose members disagree fail on every member, naming the
// difference (3 PEs, PE 1 the odd one out), within the test's time.
TEST(Adversarial, MismatchedCollectiveArgumentsFailEverywhere) {
  using nvst::coll::DType;
  using nvst::coll::RedOp;
  struct Case {
    const char* name;
    const char* want;  // in every PE's message
    std::function<void(int odd, float* in, float* out)> call;
  };
  const std::vector<Case> cases = {
      {"all_reduce dtype", "dtype int32",
       [](int odd, float* in, float* out) {
         nvst::coll::all_reduce(in, out, 64, odd ? DType::kI32 : DType::kF32, RedOp::kSum, nullptr);
       }},
      {"all_reduce op", "op max",
       [](int odd, float* in, float* out) {
         nvst::coll::all_reduce(in, out, 64, DType::kF32, odd ? RedOp::kMax : RedOp::kSum, nullptr);
       }},
      {"all_reduce count", "differ in count",
       [](int odd, float* in, float* out) {
         nvst::coll::all_reduce(in, out, odd ? 65 : 64, DType::kF32, RedOp::kSum, nullptr);
       }},
      {"all_reduce count 0 against 64", "differ in count",
       [](int odd, float* in, float* out) {
         nvst::coll::all_reduce(in, out, odd ? 64 : 0, DType::kF32, RedOp::kSum, nullptr);
       }},
      {"ring all_reduce count 0 against 64", "differ in count",
       [](int odd, float* in, float* out) {
         nvst::coll::all_reduce(in, out, odd ? 64 : 0, DType::kF32, RedOp::kSum, nullptr, nvst::coll::Algo::kRing);
       }},
      {"ring all_reduce dtype", "dtype int32",
       [](int odd, float* in, float* out) {
         nvst::coll::all_reduce(in, out, 64, odd ? DType::kI32 : DType::kF32, RedOp::kSum, nullptr,
                                nvst::coll::Algo::kRing);
       }},
      {"all_gather count", "differ in count",
       [](int odd, float* in, float* out) { nvst::coll::all_gather(in, out, odd ? 17 : 16, DType::kF32, nullptr); }},
      {"all_gather count 0 against 16", "differ in count",
       [](int odd, float* in, float* out) { nvst::coll::all_gather(in, out, odd ? 16 : 0, DType::kF32, nullptr); }},
      {"broadcast count 0 against 16", "differ in count",
       [](int odd, float* in, float* out) { nvst::coll::broadcast(in, out, odd ? 16 : 0, DType::kF32, 0, nullptr); }},
      {"all_to_all count", "differ in count",
       [](int odd, float* in, float* out) { nvst::coll::all_to_all(in, out, odd ? 9 : 8, DType::kF32, nullptr); }},
      {"reduce_scatter op", "op min",
       [](int odd, float* in, float* out) {
         nvst::coll::reduce_scatter(in, out, 16, DType::kF32, odd ? RedOp::kMin : RedOp::kSum, nullptr);
       }},
      {"reduce root", "differ in count, root",
       [](int odd, float* in, float* out) {
         nvst::coll::reduce(in, out, 16, DType::kF32, RedOp::kSum, odd ? 2 : 0, nullptr);
       }},
      {"broadcast root", "differ in count, root",
       [](int odd, float* in, float* out) { nvst::coll::broadcast(in, out, 16, DType::kF32, odd ? 1 : 0, nullptr); }},
      {"all_reduce against all_gather", "all_gather",
       [](int odd, float* in, float* out) {
         if (odd)
           nvst::coll::all_gather(in, out, 16, DType::kF32, nullptr);
         else
           nvst::coll::all_reduce(in, out, 16, DType::kF32, RedOp::kSum, nullptr);
       }},
  };
  for (const Case& c : cases) {
    auto res = run_pes(
        3,
        [&c](int rank) {
          nvst::init();
          nvst::coll::prepare();
          std::vector<float> in(4096, 1.0f), out(4096 * 3, 0.0f);
          const auto t0 = std::chrono::steady_clock::now();
          std::string msg = error_of([&] { c.call(rank == 1, in.data(), out.data()); });
          PE_EXPECT(contains(msg, "every member must make the same call") && contains(msg, c.want), c.name, ": PE ",
                    rank, " said '", msg, "'");
          PE_EXPECT(since(t0) < 5.0, c.name, ": took ", since(t0), " s");
          return 0;
        },
        {{"NVST_COLL_WORKSPACE", "1M"}}, 60);
    for (int r = 0; r < 3; ++r) EXPECT_EQ(res[r].code(), 0) << c.name << ": rank " << r;
  }
}

// ---- the fabric: a stranger with its own endpoint ------------------------------------

// A process outside the job with a libfabric endpoint of the job's provider.
class Stranger {
 public:
  explicit Stranger(const std::string& provider) {
    fi_info* h = fi_allocinfo();
    h->ep_attr->type = FI_EP_RDM;
    h->caps = FI_RMA | FI_WRITE;
    h->mode = FI_CONTEXT | FI_CONTEXT2;
    h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
    h->domain_attr->cq_data_size = 4;
    h->fabric_attr->prov_name = ::strdup(provider.c_str());
    ok_ = fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, h, &info_) == 0;
    fi_freeinfo(h);
    if (!ok_) return;
    ok_ = fi_fabric(info_->fabric_attr, &fabric_, nullptr) == 0 && fi_domain(fabric_, info_, &domain_, nullptr) == 0;
    fi_cq_attr cq{};
    cq.format = FI_CQ_FORMAT_DATA;
    fi_av_attr av{};
    av.type = FI_AV_TABLE;
    ok_ = ok_ && fi_cq_open(domain_, &cq, &cq_, nullptr) == 0 && fi_av_open(domain_, &av, &av_, nullptr) == 0 &&
          fi_endpoint(domain_, info_, &ep_, nullptr) == 0 && fi_ep_bind(ep_, &cq_->fid, FI_TRANSMIT | FI_RECV) == 0 &&
          fi_ep_bind(ep_, &av_->fid, 0) == 0 && fi_enable(ep_) == 0;
    if (!ok_) return;
    ok_ = fi_mr_reg(domain_, buf_, sizeof(buf_), FI_WRITE | FI_READ, 0, 77, 0, &mr_, nullptr) == 0;
    if (ok_ && (info_->domain_attr->mr_mode & FI_MR_ENDPOINT))
      ok_ = fi_mr_bind(mr_, &ep_->fid, 0) == 0 && fi_mr_enable(mr_) == 0;
    std::memset(buf_, 0xEE, sizeof(buf_));
  }
  ~Stranger() {
    if (mr_) fi_close(&mr_->fid);
    if (ep_) fi_close(&ep_->fid);
    if (av_) fi_close(&av_->fid);
    if (cq_) fi_close(&cq_->fid);
    if (domain_) fi_close(&domain_->fid);
    if (fabric_) fi_close(&fabric_->fid);
    if (info_) fi_freeinfo(info_);
  }
  bool ok() const { return ok_; }
  bool virt_addr() const { return (info_->domain_attr->mr_mode & FI_MR_VIRT_ADDR) != 0; }
  bool target(const std::vector<std::uint8_t>& name) {
    return fi_av_insert(av_, name.data(), 1, &peer_, 0, nullptr) == 1;
  }
  // Posts a write of `bytes` (with immediate data when `data` is set) and
  // waits up to `wait_s` for its completion: 0, a libfabric error, or -1
  // (nothing came back).
  int write(std::uint64_t addr, std::uint64_t key, std::size_t bytes, const std::uint32_t* data, double wait_s) {
    fi_context2 ctx{};
    ssize_t rc;
    const auto t0 = std::chrono::steady_clock::now();
    do {
      rc = data ? fi_writedata(ep_, buf_, bytes, fi_mr_desc(mr_), *data, peer_, addr, key, &ctx)
                : fi_write(ep_, buf_, bytes, fi_mr_desc(mr_), peer_, addr, key, &ctx);
      if (rc == -FI_EAGAIN) drain();
    } while (rc == -FI_EAGAIN && since(t0) < wait_s);
    if (rc != 0) return static_cast<int>(-rc);
    while (since(t0) < wait_s) {
      fi_cq_data_entry e{};
      ssize_t got = fi_cq_read(cq_, &e, 1);
      if (got == 1) return 0;
      if (got == -FI_EAVAIL) {
        fi_cq_err_entry err{};
        fi_cq_readerr(cq_, &err, 0);
        return err.err ? err.err : FI_EIO;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return -1;
  }

 private:
  void drain() {
    fi_cq_data_entry e{};
    if (fi_cq_read(cq_, &e, 1) == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      fi_cq_readerr(cq_, &err, 0);
    }
  }
  bool ok_ = false;
  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_cq* cq_ = nullptr;
  fid_av* av_ = nullptr;
  fid_ep* ep_ = nullptr;
  fid_mr* mr_ = nullptr;
  fi_addr_t peer_ = 0;
  alignas(64) char buf_[4096];
};

// What the job tells the stranger: where to aim (public knowledge in a real
// attack: the endpoint's port, the heap layout) and, for the forged
// doorbells, the control region's real key (as if the key had leaked).
struct Aim {
  std::uint8_t name[256];
  std::uint32_t name_len;
  std::uint64_t heap_offset, canary_offset, heap_key, control_key;
};

struct Outcome {
  int guessed_writes_landed;  // completions without error for guessed keys
  int bells_sent;
  int real_key_write;  // the control case: a write with the real heap key
};

Outcome attack(const Aim& aim, const std::string& provider) {
  Outcome o{0, 0, -1};
  // A fresh endpoint per attempt: the provider drops a connection that
  // presented a bad key, so later attempts on it would prove nothing.
  auto attempt = [&](std::uint64_t addr, std::uint64_t key, std::size_t bytes, const std::uint32_t* data) {
    Stranger s(provider);
    if (!s.ok() || !s.target({aim.name, aim.name + aim.name_len}) || s.virt_addr()) return -2;
    return s.write(addr, key, bytes, data, 2.0);
  };
  // Doorbells with the real control key (as if it had leaked): no such
  // sender, outside the sender's window, and a piece whose header does not
  // match. Each must be dropped, not end the job.
  for (std::uint32_t bell : {0xffff0000u, (1u << 16) | 0x4000u, (1u << 16) | 0u}) {
    const int rc = attempt(0, aim.control_key, 8, &bell);
    if (rc == -2) return {-1, 0, -1};
    if (rc == 0) ++o.bells_sent;
  }
  // The control case: with the real key the aim is right and bytes land.
  o.real_key_write = attempt(aim.canary_offset, aim.heap_key, 15, nullptr);
  // Guessed keys: the fixed ones the transport used to take, and others.
  for (std::uint64_t key : {0ull, 1ull, 2ull, 3ull, 4ull, 0x12345678ull, 0xdeadbeefcafef00dull}) {
    const std::uint32_t bell = 1u << 16;
    o.guessed_writes_landed += attempt(aim.heap_offset, key, 15, nullptr) == 0;
    o.guessed_writes_landed += attempt(0, key, 64, nullptr) == 0;
    o.guessed_writes_landed += attempt(0, key, 64, &bell) == 0;
  }
  return o;
}

TEST(Adversarial, StrangerWritesAreRefusedAndForgedDoorbellsDropped) {
  auto res = run_pes(2, [](int rank) {
    int to_stranger[2], from_stranger[2];
    if (rank == 0 && (::pipe(to_stranger) != 0 || ::pipe(from_stranger) != 0)) return 3;
    pid_t stranger = -1;
    if (rank == 0) {
      stranger = ::fork();
      if (stranger == 0) {  // before init: a process of its own, not a PE
        Aim aim{};
        if (::read(to_stranger[0], &aim, sizeof(aim)) != sizeof(aim)) ::_exit(4);
        const std::string provider = nvst::fabric::chosen_provider();
        Outcome o = attack(aim, provider);
        [[maybe_unused]] ssize_t n = ::write(from_stranger[1], &o, sizeof(o));
        ::_exit(0);
      }
    }
    nvst::init();
    auto* buf = static_cast<unsigned char*>(nvst::calloc(4096, 1));
    auto* sig = static_cast<std::uint64_t*>(nvst::calloc(1, 8));
    auto* canary = static_cast<unsigned char*>(nvst::calloc(64, 1));
    std::memset(buf, 0x11 + rank, 4096);
    nvst::barrier_all();
    if (rank == 0) {
      Aim aim{};
      const auto name = nvst::detail::fabric_address_of(0);
      PE_EXPECT(!name.empty() && name.size() <= sizeof(aim.name), "address of ", name.size(), " bytes");
      if (name.size() == sizeof(sockaddr_in)) {  // a socket provider: a one-host job listens on loopback only
        sockaddr_in a{};
        std::memcpy(&a, name.data(), sizeof(a));
        PE_EXPECT(a.sin_family != AF_INET || ntohl(a.sin_addr.s_addr) == INADDR_LOOPBACK, "the endpoint listens on ",
                  inet_ntoa(a.sin_addr), ", not loopback");
      }
      std::memcpy(aim.name, name.data(), name.size());
      aim.name_len = static_cast<std::uint32_t>(name.size());
      aim.heap_offset = nvst::detail::heap_offset(buf);
      aim.canary_offset = nvst::detail::heap_offset(canary);
      aim.heap_key = nvst::detail::fabric_key(0, true);
      aim.control_key = nvst::detail::fabric_key(0, false);
      PE_EXPECT(::write(to_stranger[1], &aim, sizeof(aim)) == sizeof(aim), "pipe");
      Outcome o{};
      pollfd p{from_stranger[0], POLLIN, 0};
      PE_EXPECT(::poll(&p, 1, 60000) == 1 && ::read(from_stranger[0], &o, sizeof(o)) == sizeof(o),
                "the stranger did not report");
      int st = 0;
      ::waitpid(stranger, &st, 0);
      // Completions say little (a provider may complete a write once sent);
      // what counts is that no byte landed (checked below on every PE).
      PE_EXPECT(o.guessed_writes_landed >= 0, "the stranger could not open an endpoint");
      std::fprintf(stderr, "stranger: %d guessed-key writes completed at its end, %d doorbells sent\n",
                   o.guessed_writes_landed, o.bells_sent);
      // Give the proxy a moment to see the doorbells that did arrive.
      for (int i = 0; i < 200 && nvst::detail::fabric_dropped() < static_cast<std::uint64_t>(o.bells_sent); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      PE_EXPECT(o.real_key_write == 0, "the control write with the real key failed: ", o.real_key_write);
      for (int i = 0; i < 200 && canary[14] != 0xEE; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      PE_EXPECT(canary[0] == 0xEE && canary[14] == 0xEE && canary[15] == 0, "the control write did not land");
      PE_EXPECT(o.bells_sent == 3, "the forged doorbells with the real key were not delivered (", o.bells_sent, ")");
      PE_EXPECT(nvst::detail::fabric_dropped() >= static_cast<std::uint64_t>(o.bells_sent), "dropped ",
                nvst::detail::fabric_dropped(), " of ", o.bells_sent, " forged doorbells");
    }
    nvst::barrier_all();
    for (int i = 0; i < 4096; ++i) PE_EXPECT(buf[i] == 0x11 + rank, "byte ", i, " of PE ", rank, "'s buffer changed");
    // The job still works: a put with a signal each way.
    std::vector<unsigned char> mine(64, static_cast<unsigned char>(0xA0 + rank));
    nvst::putmem_signal_nbi(buf, mine.data(), mine.size(), sig, 1, nvst::SignalOp::kAdd, 1 - rank);
    nvst::quiet();
    nvst::signal_wait_until(sig, nvst::Cmp::kEq, 1);
    PE_EXPECT(buf[0] == 0xA0 + (1 - rank), "the put after the attack did not land");
    nvst::finalize();
    return 0;
  });
  for (int r = 0; r < 2; ++r) EXPECT_EQ(res[r].code(), 0) << "rank " << r;
}

// ---- cleanup --------------------------------------------------------------------

// shm names a PE's region /dev/shm/<pid>:... and removes it only when the
// endpoint closes; a killed PE's stays. The next shm job of this user
// removes the regions of processes that have ended, and no other.
TEST(Adversarial, NextShmJobRemovesRegionsOfEndedProcesses) {
  pid_t gone = ::fork();
  if (gone == 0) ::_exit(0);
  ::waitpid(gone, nullptr, 0);
  const std::string stale = "/dev/shm/" + std::to_string(gone) + ":0:0";
  const std::string live = "/dev/shm/" + std::to_string(::getpid()) + ":9:9";
  for (const std::string& f : {stale, live}) {
    FILE* fp = std::fopen(f.c_str(), "w");
    ASSERT_NE(fp, nullptr) << f;
    std::fclose(fp);
  }
  auto res = run_pes(2,
                     [](int) {
                       nvst::init();
                       nvst::barrier_all();
                       nvst::finalize();
                       return 0;
                     },
                     {{"NVST_FABRIC_PROVIDER", "shm"}});
  for (int r = 0; r < 2; ++r) EXPECT_EQ(res[r].code(), 0) << "rank " << r;
  EXPECT_FALSE(std::filesystem::exists(stale)) << stale << " of an ended process outlived the next job";
  EXPECT_TRUE(std::filesystem::exists(live)) << live << " of a live process was removed";
  std::filesystem::remove(live);
}

// ---- soak ---------------------------------------------------------------------------

// Operations in a ring, each PE to the next: a put into its own slot and a
// signal add per operation, an all_reduce of the running count every 1000.
// Nothing may be lost. CI runs a short one; NVST_SOAK_OPS=100000 the full.
int soak(int rank) {
  const long ops = nvst::settings::get_int_in("NVST_SOAK_OPS", 1, 10'000'000).value_or(4000);
  nvst::init();
  nvst::coll::prepare();
  const int n = nvst::n_pes(), next = (rank + 1) % n, prev = (rank + n - 1) % n;
  constexpr long kSlots = 4096;
  auto* slots = static_cast<std::uint64_t*>(nvst::calloc(kSlots, 8));
  auto* count = static_cast<std::uint64_t*>(nvst::calloc(1, 8));
  std::vector<std::uint64_t> values(kSlots);
  for (long i = 0; i < ops; ++i) {
    const long slot = i % kSlots;
    if (slot == 0 && i > 0) nvst::quiet();  // values[] is reused
    values[static_cast<std::size_t>(slot)] = (static_cast<std::uint64_t>(rank) << 40) | static_cast<std::uint64_t>(i);
    nvst::putmem_signal_nbi(&slots[slot], &values[static_cast<std::size_t>(slot)], 8, count, 1, nvst::SignalOp::kAdd,
                            next);
    if (i % 1000 == 999) {
      std::uint64_t mine = static_cast<std::uint64_t>(i + 1), sum = 0;
      nvst::coll::all_reduce(&mine, &sum, 1, nvst::coll::DType::kI64, nvst::coll::RedOp::kSum, nullptr);
      PE_EXPECT(sum == static_cast<std::uint64_t>(n) * mine, "all_reduce at op ", i, ": ", sum);
    }
  }
  nvst::quiet();
  nvst::signal_wait_until(count, nvst::Cmp::kEq, static_cast<std::uint64_t>(ops));
  nvst::barrier_all();
  long wrong = 0;
  for (long slot = 0; slot < std::min(ops, kSlots); ++slot) {
    const long last = slot + (ops - 1 - slot) / kSlots * kSlots;  // the last op that wrote this slot
    wrong += slots[slot] != ((static_cast<std::uint64_t>(prev) << 40) | static_cast<std::uint64_t>(last));
  }
  PE_EXPECT(wrong == 0, wrong, " slots hold the wrong operation after ", ops, " operations");
  nvst::finalize();
  return 0;
}

TEST(Adversarial, SoakNothingLostAtTwoAndFourPes) {
  for (int pes : {2, 4}) {
    auto res = run_pes(pes, soak, {{"NVST_COLL_WORKSPACE", "1M"}}, 600);
    for (int r = 0; r < pes; ++r) EXPECT_EQ(res[r].code(), 0) << pes << " PEs: rank " << r;
  }
}

// ---- dead PEs -------------------------------------------------------------------

// PE 2 of 4 is killed in `phase`; every survivor must end its wait with a
// message naming rank 2 within 10 s, whether or not it talks to PE 2.
enum class Phase { kJoined, kSignalWait, kPutSignalStream, kAllReduce, kAllGather, kBroadcast, kAllToAll };

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::kJoined: return "after joining";
    case Phase::kSignalWait: return "signal_wait_until";
    case Phase::kPutSignalStream: return "put_signal stream";
    case Phase::kAllReduce: return "all_reduce";
    case Phase::kAllGather: return "all_gather";
    case Phase::kBroadcast: return "broadcast";
    case Phase::kAllToAll: return "all_to_all";
  }
  return "?";
}

int killed_in(Phase phase, int rank) {
  constexpr int kVictim = 2;
  nvst::init();
  const int n = nvst::n_pes();
  auto* sig = static_cast<std::uint64_t*>(nvst::calloc(8, 8));
  auto* data = static_cast<char*>(nvst::malloc(1 << 16));
  nvst::coll::prepare();
  std::vector<float> in(4096, 1.0f), out(4096 * static_cast<std::size_t>(n));
  nvst::barrier_all();
  auto t0 = std::chrono::steady_clock::now();
  std::string msg = error_of([&] {
    for (int round = 0;; ++round) {
      if (rank == kVictim && round == 3) ::raise(SIGKILL);
      if (round == 3) t0 = std::chrono::steady_clock::now();
      switch (phase) {
        case Phase::kJoined:
          if (round >= 3) nvst::barrier_all();
          break;
        case Phase::kSignalWait:  // waits for PE 0, which waits too: only the watch can end it
          if (round >= 3) nvst::signal_wait_until(sig, nvst::Cmp::kEq, 12345);
          break;
        case Phase::kPutSignalStream: {  // a ring of the survivors; the victim only sends
          const int to = (rank + 1) % n == kVictim ? (rank + 2) % n : (rank + 1) % n;
          nvst::putmem_signal_nbi(data, in.data(), 4096, sig, 1, nvst::SignalOp::kAdd, to);
          nvst::quiet();
          if (rank != kVictim) nvst::signal_wait_until(sig, nvst::Cmp::kGe, static_cast<std::uint64_t>(round + 1));
          break;
        }
        case Phase::kAllReduce:
          nvst::coll::all_reduce(in.data(), out.data(), in.size(), nvst::coll::DType::kF32, nvst::coll::RedOp::kSum,
                                 nullptr);
          break;
        case Phase::kAllGather:
          nvst::coll::all_gather(in.data(), out.data(), in.size(), nvst::coll::DType::kF32, nullptr);
          break;
        case Phase::kBroadcast:
          nvst::coll::broadcast(in.data(), out.data(), in.size(), nvst::coll::DType::kF32, 0, nullptr);
          break;
        case Phase::kAllToAll:
          nvst::coll::all_to_all(in.data(), out.data(), in.size() / static_cast<std::size_t>(n),
                                 nvst::coll::DType::kF32, nullptr);
          break;
      }
      if (round > 100000) return;
    }
  });
  const double dt = since(t0);
  PE_EXPECT(contains(msg, "rank 2") || contains(msg, "PE 2"), phase_name(phase), ": PE ", rank, " said '", msg, "'");
  PE_EXPECT(dt < 10.0, phase_name(phase), ": PE ", rank, " took ", dt, " s");
  return 0;
}

class KilledPe : public ::testing::TestWithParam<Phase> {};

TEST_P(KilledPe, EverySurvivorNamesItWithinTenSeconds) {
  const Phase phase = GetParam();
  auto res = run_pes(
      4, [phase](int rank) { return killed_in(phase, rank); },
      {{"NVST_TIMEOUT_S", "30"}, {"NVST_COLL_WORKSPACE", "1M"}}, 60);
  EXPECT_EQ(res[2].signal(), SIGKILL);
  for (int r : {0, 1, 3}) EXPECT_EQ(res[r].code(), 0) << phase_name(phase) << ": rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Phases, KilledPe,
                         ::testing::Values(Phase::kJoined, Phase::kSignalWait, Phase::kPutSignalStream,
                                           Phase::kAllReduce, Phase::kAllGather, Phase::kBroadcast, Phase::kAllToAll),
                         [](const auto& info) {
                           std::string s = phase_name(info.param);
                           for (char& c : s)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return s;
                         });

}  // namespace
