// The runtime's host API on host-memory PEs (what runs without a GPU).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "nvst/nvst.hpp"
#include "pe_harness.hpp"
#include "base/launch_env.hpp"

using namespace nvst::test;

namespace {
std::uint64_t heap_offset(const void* p) {
  // Offset of p from this PE's heap: nvst::ptr(p, me) == p, and every block
  // starts after the reserved region, so (p - first allocation) is compared.
  return reinterpret_cast<std::uintptr_t>(p);
}
}  // namespace

TEST(Runtime, SymmetricAllocationAcrossFourPes) {
  auto res = run_pes(4, [](int rank) {
    nvst::init();
    PE_EXPECT(nvst::my_pe() == rank && nvst::n_pes() == 4, "pe ", nvst::my_pe());
    PE_EXPECT(nvst::heap_kind() == nvst::HeapKind::kHost, "heap kind");
    char* first = static_cast<char*>(nvst::malloc(100));
    char* second = static_cast<char*>(nvst::align(4096, 5000));
    PE_EXPECT(reinterpret_cast<std::uintptr_t>(second) % 4096 == 0, "align");
    PE_EXPECT(reinterpret_cast<std::uintptr_t>(first) % 256 == 0, "default alignment");
    // Same offset between blocks on every PE (heaps are at different
    // addresses in each process, offsets within them agree).
    std::uint64_t delta = heap_offset(second) - heap_offset(first);
    std::uint64_t in_heap = nvst::heap_size() - nvst::heap_free_bytes();
    std::uint64_t mine[2] = {delta, in_heap};
    auto all = nvst::bootstrap_allgather(mine, sizeof(mine));
    for (int p = 0; p < 4; ++p)
      PE_EXPECT(std::memcmp(all.data() + p * sizeof(mine), mine, sizeof(mine)) == 0, "PE ", p,
                " has a different layout");
    auto* z = static_cast<std::uint32_t*>(nvst::calloc(1000, 4));
    for (int i = 0; i < 1000; ++i) PE_EXPECT(z[i] == 0, "calloc not zero at ", i);
    PE_EXPECT(nvst::ptr(first, rank) == first, "ptr to self");
    PE_EXPECT(nvst::ptr(first, (rank + 1) % 4) == nullptr, "host heaps are not reachable");
    PE_EXPECT(nvst::gpu_of(rank).empty() && nvst::gpu_of((rank + 1) % 4).empty(), "host PEs have no GPU");
    PE_EXPECT(nvst::team_n_pes(nvst::Team::kNode) == 4 && nvst::team_translate_pe(nvst::Team::kNode, 3) == 3,
              "node team");
    nvst::free(z);
    nvst::free(second);
    char* again = static_cast<char*>(nvst::align(4096, 5000));
    PE_EXPECT(again == second, "freed space is reused");
    nvst::free(again);
    nvst::free(first);
    PE_EXPECT(nvst::heap_free_bytes() == nvst::heap_size() - 64 * 1024, "all bytes back");
    nvst::finalize();
    return 0;
  });
  for (int r = 0; r < 4; ++r) EXPECT_EQ(res[r].code(), 0) << "rank " << r;
}

// calloc is zeroed everywhere before any PE returns: a put issued right
// after it lands in zeroed memory and stays. PE 1 zeroes 64 MiB slowly (its
// own busy threads take most of the cores); PE 0 puts into the last word at
// once. Were calloc to return before every PE's zeroing, PE 1's memset would
// reach that word after the put.
TEST(Runtime, CallocIsZeroEverywhereBeforeAnyPeReturns) {
  auto res = run_pes(2,
                     [](int me) {
                       nvst::init();
                       for (int round = 0; round < 3; ++round) {
                         std::atomic<bool> stop{false};
                         std::vector<std::thread> busy;
                         if (me == 1)
                           for (int i = 0; i < 6; ++i)
                             busy.emplace_back([&] {
                               while (!stop.load(std::memory_order_relaxed)) {
                               }
                             });
                         constexpr std::size_t kWords = std::size_t{8} << 20;
                         auto* z = static_cast<std::uint64_t*>(nvst::calloc(kWords, 8));
                         stop = true;
                         for (auto& t : busy) t.join();
                         const std::uint64_t v = 0xCA110C00ull + static_cast<std::uint64_t>(round);
                         if (me == 0) nvst::putmem(&z[kWords - 1], &v, 8, 1);
                         nvst::barrier_all();
                         if (me == 1)
                           PE_EXPECT(z[kWords - 1] == v, "round ", round, ": the put after calloc was erased");
                         nvst::free(z);
                       }
                       nvst::finalize();
                       return 0;
                     },
                     {{"NVST_SYMMETRIC_SIZE", "128M"}});
  for (int r = 0; r < 2; ++r) EXPECT_EQ(res[r].code(), 0) << "rank " << r;
}

TEST(Runtime, AllocationErrorsAreClearOnEveryPe) {
  auto res = run_pes(3, [](int rank) {
    nvst::init();
    std::string msg = error_of([&] { nvst::malloc(rank == 1 ? 2048 : 1024); });
    PE_EXPECT(contains(msg, "disagree") && contains(msg, "rank 1: 2048 bytes") && contains(msg, "rank 0: 1024 bytes"),
              msg);
    msg = error_of([] { nvst::malloc(std::size_t{1} << 40); });
    PE_EXPECT(contains(msg, "exhausted") && contains(msg, "NVST_SYMMETRIC_SIZE"), msg);
    int local = 0;
    msg = error_of([&] { nvst::free(&local); });
    PE_EXPECT(contains(msg, "not in the symmetric heap"), msg);
    void* p = nvst::malloc(64);
    msg = error_of([&] { nvst::free(static_cast<char*>(p) + 16); });
    PE_EXPECT(contains(msg, "not returned by nvst::malloc"), msg);
    nvst::free(p);
    msg = error_of([&] { nvst::free(p); });
    PE_EXPECT(contains(msg, "freed already"), msg);
    msg = error_of([] { nvst::align(3, 64); });
    PE_EXPECT(contains(msg, "power of two"), msg);
    nvst::finalize();
    return 0;
  });
  for (int r = 0; r < 3; ++r) EXPECT_EQ(res[r].code(), 0) << "rank " << r;
}

TEST(Runtime, ArgumentValidation) {
  auto res = run_pes(
      2,
      [](int) {
        std::string msg = error_of([] { nvst::malloc(10); });
        PE_EXPECT(contains(msg, "before nvst::init"), msg);
        nvst::init();
        msg = error_of([] { nvst::init(); });
        PE_EXPECT(contains(msg, "called twice"), msg);
        void* p = nvst::malloc(4096);
        msg = error_of([&] { nvst::ptr(p, 2); });
        PE_EXPECT(contains(msg, "PE 2 out of range"), msg);
        msg = error_of([&] { nvst::ptr(p, -1); });
        PE_EXPECT(contains(msg, "out of range"), msg);
        int local = 0;
        msg = error_of([&] { nvst::ptr(&local, 0); });
        PE_EXPECT(contains(msg, "not in the symmetric heap"), msg);
        // Gets from a PE beyond load/store reach are not supported (puts are,
        // through the proxy: test_fabric.cpp).
        msg = error_of([&] { nvst::getmem(&local, p, 4, (nvst::my_pe() + 1) % 2); });
        PE_EXPECT(contains(msg, "not reachable"), msg);
        msg = error_of([&] { nvst::signal_wait_until(static_cast<std::uint64_t*>(p) + 1, nvst::Cmp::kEq, 1); });
        PE_EXPECT(contains(msg, "timed out") && contains(msg, "== 1"), msg);
        msg = error_of([&] {
          nvst::signal_op(reinterpret_cast<std::uint64_t*>(static_cast<char*>(p) + 4), 1, nvst::SignalOp::kAdd, 0);
        });
        PE_EXPECT(contains(msg, "8-byte aligned"), msg);
        msg = error_of([&] { nvst::putmem(&local, &local, 4, 0); });
        PE_EXPECT(contains(msg, "nvst::putmem: dest") && contains(msg, "not inside the symmetric heap"), msg);
        // Each form names itself and the side that must be symmetric.
        msg = error_of([&] { nvst::getmem(&local, &local, 4, 0); });
        PE_EXPECT(contains(msg, "nvst::getmem: src") && contains(msg, "not inside the symmetric heap"), msg);
        msg = error_of([&] { nvst::putmem_on_stream(&local, &local, 4, 0, nullptr); });
        PE_EXPECT(contains(msg, "nvst::putmem_on_stream: dest") && contains(msg, "not inside"), msg);
        msg = error_of([&] { nvst::getmem_on_stream(&local, &local, 4, 0, nullptr); });
        PE_EXPECT(contains(msg, "nvst::getmem_on_stream: src") && contains(msg, "not inside"), msg);
        // To itself a host PE copies with memcpy.
        std::uint32_t v = 0xC0FFEE00u + static_cast<std::uint32_t>(nvst::my_pe()), back = 0;
        nvst::putmem(p, &v, sizeof(v), nvst::my_pe());
        nvst::getmem(&back, p, sizeof(back), nvst::my_pe());
        PE_EXPECT(back == v, "self put/get");
        msg = error_of([&] { nvst::putmem(static_cast<char*>(p) + nvst::heap_size(), &local, 4, 0); });
        PE_EXPECT(contains(msg, "not inside the symmetric heap"), msg);
        msg = error_of([] { nvst::team_translate_pe(nvst::Team::kNode, 5); });
        PE_EXPECT(contains(msg, "out of range"), msg);
        msg = error_of([] { nvst::barrier_all_on_stream(nullptr); });
        PE_EXPECT(contains(msg, "needs a GPU"), msg);
        nvst::free(p);
        nvst::finalize();
        return 0;
      },
      {{"NVST_TIMEOUT_S", "2"}});
  for (int r = 0; r < 2; ++r) EXPECT_EQ(res[r].code(), 0) << "rank " << r;
}

TEST(Runtime, BadSettingsFailInit) {
  for (auto [var, val, want] :
       {std::tuple{"NVST_SYMMETRIC_SIZE", "lots", "NVST_SYMMETRIC_SIZE"}, std::tuple{"NVST_HEAP", "bogus", "NVST_HEAP"},
        std::tuple{"NVST_TIMEOUT_S", "-1", "NVST_TIMEOUT_S"}}) {
    auto res = run_pes(1,
                       [want = std::string(want)](int) {
                         std::string msg = error_of([] { nvst::init(); });
                         PE_EXPECT(contains(msg, want), msg);
                         return 0;
                       },
                       {{var, val}});
    EXPECT_EQ(res[0].code(), 0) << var;
  }
}

TEST(Runtime, PesDisagreeingOnHeapSizeFailInit) {
  auto res = run_pes(2, [](int rank) {
    ::setenv("NVST_SYMMETRIC_SIZE", rank == 0 ? "16M" : "32M", 1);
    std::string msg = error_of([] { nvst::init(); });
    PE_EXPECT(contains(msg, "disagree on the symmetric heap size"), msg);
    return 0;
  });
  for (int r = 0; r < 2; ++r) EXPECT_EQ(res[r].code(), 0) << "rank " << r;
}

TEST(Runtime, KilledPeerDuringBarrierIsReported) {
  auto res = run_pes(4, [](int rank) {
    nvst::init();
    nvst::barrier_all();
    if (rank == 2) ::raise(SIGKILL);
    auto t0 = std::chrono::steady_clock::now();
    std::string msg = error_of([] { nvst::barrier_all(); });
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    PE_EXPECT(contains(msg, "rank 2") && contains(msg, "died"), msg);
    PE_EXPECT(dt < 10.0, "reported after ", dt, " s");
    return 0;
  });
  EXPECT_EQ(res[2].signal(), SIGKILL);
  for (int r : {0, 1, 3}) EXPECT_EQ(res[r].code(), 0) << "rank " << r;
}

TEST(Runtime, InitFailureOnOnePeIsExplainedToTheOthers) {
  auto res = run_pes(3,
                     [](int rank) {
                       if (rank == 1) ::setenv("NVST_HEAP", "cumem", 1);  // no GPU here: rank 1 fails
                       std::string msg = error_of([] { nvst::init(); });
                       if (rank == 1)
                         PE_EXPECT(contains(msg, "needs a GPU") || contains(msg, "disagree"), msg);
                       else
                         PE_EXPECT(!msg.empty(), "init succeeded without rank 1");
                       return 0;
                     },
                     {{"NVST_TIMEOUT_S", "3"}});
  for (int r = 0; r < 3; ++r) EXPECT_EQ(res[r].code(), 0) << "rank " << r;
}

// Launcher environments, parsed in a child so the test's env stays clean.
TEST(LaunchEnv, TorchrunAndMpirunVariables) {
  auto res = run_pes(1, [](int) {
    ::unsetenv("NVST_UNIQUE_ID");
    ::setenv("RANK", "3", 1);
    ::setenv("WORLD_SIZE", "8", 1);
    ::setenv("LOCAL_RANK", "1", 1);
    ::setenv("LOCAL_WORLD_SIZE", "2", 1);
    ::setenv("MASTER_ADDR", "10.1.2.3", 1);
    ::setenv("MASTER_PORT", "29500", 1);
    // Across hosts torchrun hands out no secret: the job must bring one.
    std::string msg = error_of([] { nvst::launch_info_from_environment(); });
    PE_EXPECT(contains(msg, "set NVST_COOKIE"), msg);
    ::setenv("NVST_COOKIE", "00112233445566778899aabbccddeeff", 1);
    nvst::LaunchInfo l = nvst::launch_info_from_environment();
    PE_EXPECT(l.launcher == "torchrun" && l.rank == 3 && l.world == 8 && l.local_rank == 1 && l.local_world == 2 &&
                  l.id.host == "10.1.2.3" && l.id.port == 29501,
              "torchrun parse: ", l.launcher, " ", l.rank, " ", l.id.port);
    auto cookie = l.id.cookie;
    ::setenv("RANK", "5", 1);
    PE_EXPECT(nvst::launch_info_from_environment().id.cookie == cookie && cookie[0] == 0x00 && cookie[15] == 0xff,
              "ranks of one job must take NVST_COOKIE");
    ::setenv("RANK", "8", 1);
    msg = error_of([] { nvst::launch_info_from_environment(); });
    PE_EXPECT(contains(msg, "rank 8 out of range"), msg);
    for (const char* v :
         {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "NVST_COOKIE"})
      ::unsetenv(v);
    ::setenv("OMPI_COMM_WORLD_RANK", "0", 1);
    ::setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
    msg = error_of([] { nvst::launch_info_from_environment(); });
    PE_EXPECT(contains(msg, "NVST_BOOTSTRAP_ADDR"), msg);
    ::setenv("NVST_BOOTSTRAP_ADDR", "127.0.0.1", 1);
    l = nvst::launch_info_from_environment();
    PE_EXPECT(l.launcher == "mpirun" && l.world == 2 && l.id.port == 29600 && !l.id.cookie_file.empty(),
              "mpirun parse (one host: the cookie travels by file)");
    return 0;
  });
  EXPECT_EQ(res[0].code(), 0);
}
