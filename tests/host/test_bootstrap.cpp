#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "pe_harness.hpp"
#include "base/bootstrap.hpp"
#include "nvst/settings.hpp"

using nvst::Bootstrap;
using nvst::UniqueId;
using namespace nvst::test;

namespace {
double elapsed_s(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
Bootstrap make_bootstrap(int rank, int world) {
  return Bootstrap(UniqueId::parse(std::getenv("NVST_UNIQUE_ID")), rank, world, 8.0);
}
}  // namespace

TEST(UniqueId, RoundTripsAndRejectsJunk) {
  UniqueId id = UniqueId::create_loopback();
  UniqueId back = UniqueId::parse(id.to_string());
  EXPECT_EQ(back.host, id.host);
  EXPECT_EQ(back.port, id.port);
  EXPECT_EQ(back.cookie, id.cookie);
  EXPECT_NE(UniqueId::create_loopback().cookie, id.cookie);
  for (const char* bad :
       {"", "nvst2:h:1:00112233445566778899aabbccddeeff", "nvst1:h:0:00112233445566778899aabbccddeeff",
        "nvst1:h:70000:00112233445566778899aabbccddeeff", "nvst1:h:5:0011",
        "nvst1:h:5:zz112233445566778899aabbccddeeff", "nvst1::5:00112233445566778899aabbccddeeff"}) {
    std::string msg = error_of([&] { UniqueId::parse(bad); });
    EXPECT_TRUE(contains(msg, "malformed unique id")) << bad << " -> " << msg;
  }
}

TEST(Bootstrap, FourProcessesAllgatherBroadcastBarrier) {
  auto res = run_pes(4, [](int rank) {
    Bootstrap b = make_bootstrap(rank, 4);
    std::uint64_t mine = 1000 + static_cast<std::uint64_t>(rank) * 7;
    auto all = b.allgather(&mine, sizeof(mine), "test allgather");
    PE_EXPECT(all.size() == 4 * sizeof(mine), "size ", all.size());
    for (int r = 0; r < 4; ++r) {
      std::uint64_t v;
      std::memcpy(&v, all.data() + r * sizeof(v), sizeof(v));
      PE_EXPECT(v == 1000 + static_cast<std::uint64_t>(r) * 7, "rank ", r, " gave ", v);
    }
    char text[16] = {};
    if (rank == 2) std::strcpy(text, "from two");
    b.broadcast(text, sizeof(text), 2, "test broadcast");
    PE_EXPECT(std::string(text) == "from two", text);
    std::string var(static_cast<std::size_t>(rank) * 3, static_cast<char>('a' + rank));
    auto parts = b.exchange(var.data(), var.size(), "test exchange");
    for (int r = 0; r < 4; ++r)
      PE_EXPECT(parts[static_cast<std::size_t>(r)].size() == static_cast<std::size_t>(r) * 3, "exchange size");
    for (int i = 0; i < 50; ++i) b.barrier("test barrier");
    return 0;
  });
  for (int r = 0; r < 4; ++r) EXPECT_EQ(res[r].code(), 0) << "rank " << r;
}

TEST(Bootstrap, AllgatherSizeMismatchIsReportedEverywhere) {
  auto res = run_pes(3, [](int rank) {
    Bootstrap b = make_bootstrap(rank, 3);
    std::vector<char> mine(rank == 1 ? 12 : 8, 'x');
    std::string msg = error_of([&] { b.allgather(mine.data(), mine.size(), "sized"); });
    PE_EXPECT(contains(msg, "different sizes") && contains(msg, "rank 1: 12"), msg);
    return 0;
  });
  for (int r = 0; r < 3; ++r) EXPECT_EQ(res[r].code(), 0) << "rank " << r;
}

// The stranger needs the id before the job starts, so this test builds the
// job by hand: rank 0 in a child, the stranger and then rank 1 in the parent.
TEST(Bootstrap, StrangerGetsNoWelcomeAndJobGoesOn) {
  UniqueId id = UniqueId::create_loopback();
  pid_t root = ::fork();
  if (root == 0) {
    int code = 0;
    try {
      Bootstrap b(id, 0, 2, 8.0);
      b.barrier("job");
      code = b.refused_connections() >= 2 ? 0 : 3;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "root: %s\n", e.what());
      code = 2;
    }
    ::_exit(code);
  }
  // 1) A raw connection presenting a wrong cookie is closed without a welcome.
  int fd = -1;
  for (int i = 0; i < 200 && fd < 0; ++i) {
    int s = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(id.port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0)
      fd = s;
    else {
      ::close(s);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  ASSERT_GE(fd, 0);
  struct {
    std::uint32_t magic, version;
    std::uint8_t cookie[16];
    std::int32_t rank, world;
  } hello{0x5453564e, 1, {}, 1, 2};
  std::memset(hello.cookie, 0x42, 16);
  ASSERT_EQ(::send(fd, &hello, sizeof(hello), 0), static_cast<ssize_t>(sizeof(hello)));
  char buf[4];
  EXPECT_EQ(::recv(fd, buf, sizeof(buf), 0), 0) << "rank 0 answered a stranger";
  ::close(fd);
  // 2) Our own Bootstrap with the wrong cookie says it was refused.
  UniqueId wrong = id;
  wrong.cookie[0] ^= 1;
  std::string msg = error_of([&] { Bootstrap b(wrong, 1, 2, 5.0); });
  EXPECT_TRUE(contains(msg, "refused")) << msg;
  // 3) The real rank 1 still joins and the job completes.
  EXPECT_NO_THROW({
    Bootstrap b(id, 1, 2, 8.0);
    b.barrier("job");
  });
  int status = 0;
  ::waitpid(root, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

TEST(Bootstrap, KilledPeerIsReportedWithinTenSeconds) {
  for (int victim : {2, 0}) {
    auto res = run_pes(4, [victim](int rank) {
      Bootstrap b = make_bootstrap(rank, 4);
      b.barrier("warm-up");
      if (rank == victim) ::raise(SIGKILL);
      auto t0 = std::chrono::steady_clock::now();
      std::string msg = error_of([&] { b.barrier("after kill"); });
      double dt = elapsed_s(t0);
      std::string want = victim == 0 ? "rank 0" : "rank " + std::to_string(victim);
      PE_EXPECT(contains(msg, want) && contains(msg, victim == 0 ? "lost" : "died"), msg);
      PE_EXPECT(dt < 10.0, "took ", dt, " s");
      return 0;
    });
    for (int r = 0; r < 4; ++r) {
      if (r == victim)
        EXPECT_EQ(res[r].signal(), SIGKILL);
      else
        EXPECT_EQ(res[r].code(), 0) << "victim " << victim << " rank " << r;
    }
  }
}

TEST(Bootstrap, MissingRankTimesOutNamingIt) {
  auto res = run_pes(3, [](int rank) {
    Bootstrap b(UniqueId::parse(std::getenv("NVST_UNIQUE_ID")), rank, 3, 2.0);
    if (rank == 1) {
      std::this_thread::sleep_for(std::chrono::seconds(4));
      return 0;
    }
    auto t0 = std::chrono::steady_clock::now();
    std::string msg = error_of([&] { b.barrier("slow"); });
    PE_EXPECT(contains(msg, "timed out"), msg);
    if (rank == 0) PE_EXPECT(contains(msg, "rank(s) 1"), msg);
    PE_EXPECT(elapsed_s(t0) < 6.0, "took too long");
    // Rank 2 stays a moment: its exit would reach rank 0's watch as a death
    // before rank 0's own timeout when the two timeouts end close together.
    if (rank == 2) std::this_thread::sleep_for(std::chrono::seconds(1));
    return 0;
  });
  for (int r = 0; r < 3; ++r) EXPECT_EQ(res[r].code(), 0) << "rank " << r;
}
