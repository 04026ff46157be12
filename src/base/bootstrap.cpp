#include "base/bootstrap.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "nvst/error.hpp"
#include "base/job_secret.hpp"

namespace nvst {

namespace {

constexpr std::uint32_t kMagic = 0x5453564e;  // "NVST"
constexpr std::uint32_t kVersion = 2;

// Which of a rank's two connections to rank 0 a greeting opens.
enum : std::int32_t { kChannelOps = 0, kChannelWatch = 1 };

struct Hello {
  std::uint32_t magic;
  std::uint32_t version;
  std::uint8_t cookie[16];
  std::int32_t rank;
  std::int32_t world;
  std::int32_t channel;
  std::int32_t pad;
};
static_assert(sizeof(Hello) == 40);

// How long a new connection may take to greet: a rank sends its greeting
// right after connecting, so this only bounds what a stranger can hold.
constexpr double kGreetingS = 3.0;
// Connections greeting at once; beyond it the oldest stranger is dropped.
constexpr std::size_t kMaxGreeting = 128;

enum : std::uint32_t { kWelcome = 0x57454c43 };  // root's reply to a good hello

enum class Kind : std::uint32_t { kData = 1, kAbort = 2 };

// The operation's name travels with it (cut to 47 characters), so a PE in
// another operation is named with what it is doing.
struct FrameHeader {
  Kind kind;
  std::uint32_t seq;
  std::uint64_t bytes;
  char op[48];
};
static_assert(sizeof(FrameHeader) == 64);

std::string op_name(const FrameHeader& h) { return std::string(h.op, strnlen(h.op, sizeof(h.op))); }

// Frames larger than this are a protocol error, not a request to allocate.
constexpr std::uint64_t kMaxFrameBytes = std::uint64_t{1} << 32;

void send_frame(int fd, Kind kind, std::uint32_t seq, const void* data, std::size_t bytes, const char* op = "") {
  FrameHeader h{kind, seq, bytes, {}};
  std::strncpy(h.op, op, sizeof(h.op) - 1);
  net::send_all(fd, &h, sizeof(h));
  if (bytes) net::send_all(fd, data, bytes);
}

struct Frame {
  net::Io io = net::Io::kOk;
  FrameHeader header{};
  std::vector<std::byte> payload;
};

Frame recv_frame(int fd, net::Deadline deadline) {
  Frame f;
  f.io = net::recv_all(fd, &f.header, sizeof(f.header), deadline);
  if (f.io != net::Io::kOk) return f;
  NVST_REQUIRE(f.header.bytes <= kMaxFrameBytes, "bootstrap frame of ", f.header.bytes, " bytes: protocol error");
  f.payload.resize(f.header.bytes);
  if (f.header.bytes) f.io = net::recv_all(fd, f.payload.data(), f.header.bytes, deadline);
  return f;
}

std::string as_text(const std::vector<std::byte>& b) {
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

bool same_cookie(const std::uint8_t* a, const std::uint8_t* b) {
  std::uint8_t diff = 0;  // constant time: no early exit on the first byte
  for (int i = 0; i < 16; ++i) diff |= a[i] ^ b[i];
  return diff == 0;
}

}  // namespace

std::array<std::uint8_t, 16> random_cookie() {
  std::array<std::uint8_t, 16> c{};
  std::size_t got = 0;
  while (got < c.size()) {
    ssize_t n = ::getrandom(c.data() + got, c.size() - got, 0);
    if (n < 0 && errno == EINTR) continue;
    NVST_CHECK_SYS(n < 0 ? -1 : 0);
    got += static_cast<std::size_t>(n);
  }
  return c;
}

UniqueId UniqueId::create_loopback() {
  UniqueId id;
  id.host = "127.0.0.1";
  id.port = net::free_loopback_port();
  id.cookie = random_cookie();
  return id;
}

UniqueId UniqueId::create_for_host(const std::string& host) {
  NVST_REQUIRE(!host.empty() && host.find(':') == std::string::npos, "nvst::new_unique_id: host '", host,
               "' must be a host name or IPv4 address");
  if (host == "127.0.0.1" || host == "localhost") return create_loopback();
  UniqueId id;
  id.host = host;
  net::listen_tcp(false, 0, &id.port);  // a port free on every interface (closed again)
  id.cookie = random_cookie();
  return id;
}

std::string UniqueId::to_string() const {
  return "nvst1:" + host + ":" + std::to_string(port) + ":" + secret::to_hex(cookie.data(), cookie.size());
}

UniqueId UniqueId::parse(const std::string& text) {
  auto bad = [&](const char* why) {
    NVST_FAIL("malformed unique id '", text, "': ", why, " (expected nvst1:HOST:PORT:32-hex-digit-cookie)");
  };
  if (text.rfind("nvst1:", 0) != 0) bad("missing nvst1: prefix");
  std::size_t c2 = text.rfind(':');
  if (c2 == std::string::npos || c2 <= 6) bad("missing fields");
  std::size_t c1 = text.rfind(':', c2 - 1);
  if (c1 == std::string::npos || c1 < 6) bad("missing fields");
  UniqueId id;
  id.host = text.substr(6, c1 - 6);
  if (id.host.empty()) bad("empty host");
  std::string port = text.substr(c1 + 1, c2 - c1 - 1);
  char* end = nullptr;
  long p = std::strtol(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || p <= 0 || p > 65535) bad("port out of range");
  id.port = static_cast<std::uint16_t>(p);
  std::string ck = text.substr(c2 + 1);
  if (ck.size() != 32) bad("cookie must be 32 hex digits");
  for (int i = 0; i < 16; ++i) {
    unsigned v = 0;
    if (std::sscanf(ck.c_str() + 2 * i, "%2x", &v) != 1) bad("cookie is not hex");
    id.cookie[i] = static_cast<std::uint8_t>(v);
  }
  return id;
}

Bootstrap::Bootstrap(const UniqueId& id, int rank, int world, double timeout_s)
    : rank_(rank), world_(world), timeout_s_(timeout_s), cookie_(id.cookie) {
  NVST_REQUIRE(world >= 1, "bootstrap: world size must be >= 1, got ", world);
  NVST_REQUIRE(rank >= 0 && rank < world, "bootstrap: rank ", rank, " out of range [0, ", world, ")");
  NVST_REQUIRE(timeout_s > 0, "bootstrap: timeout must be > 0");
  if (world == 1) return;
  if (rank == 0) {
    if (!id.cookie_file.empty()) cookie_ = secret::publish_cookie(id.cookie_file);
    bool loopback = id.host.rfind("127.", 0) == 0 || id.host == "localhost";
    try {
      listen_ = net::listen_tcp(loopback, id.port, nullptr);
      accept_peers();
    } catch (...) {
      if (!id.cookie_file.empty()) ::unlink(id.cookie_file.c_str());
      throw;
    }
    if (!id.cookie_file.empty()) ::unlink(id.cookie_file.c_str());  // every rank has it now
    listen_.reset();  // nobody else may join: strangers now meet a closed port
  } else {
    connect_to_root(id);
  }
  wake_ = net::Fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  NVST_CHECK_SYS(wake_.get());
  watching_.store(true);
  watch_thread_ = std::thread([this] { watch_loop(); });
}

Bootstrap::~Bootstrap() { stop_watch(); }

void Bootstrap::connect_to_root(const UniqueId& id) {
  auto deadline = net::deadline_after(timeout_s_);
  if (!id.cookie_file.empty()) cookie_ = secret::read_cookie(id.cookie_file, deadline);
  auto greet = [&](std::int32_t channel) {
    net::Fd fd = net::connect_tcp(id.host, id.port, deadline);
    Hello h{kMagic, kVersion, {}, rank_, world_, channel, 0};
    std::memcpy(h.cookie, cookie_.data(), 16);
    net::send_all(fd.get(), &h, sizeof(h));
    std::uint32_t welcome = 0;
    net::Io io = net::recv_all(fd.get(), &welcome, sizeof(welcome), deadline);
    if (io == net::Io::kClosed) return net::Fd();
    NVST_REQUIRE(io == net::Io::kOk, "timed out after ", timeout_s_,
                 " s waiting for rank 0 to accept this rank (NVST_TIMEOUT_S)");
    NVST_REQUIRE(welcome == kWelcome, "rank 0 sent a malformed greeting");
    return fd;
  };
  for (;;) {
    root_ = greet(kChannelOps);
    if (root_.valid()) break;
    // A cookie file left by an earlier job that rank 0 has not replaced yet:
    // read it again while there is time.
    bool retry = false;
    if (!id.cookie_file.empty() && net::Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      const auto again = secret::read_cookie(id.cookie_file, deadline);
      retry = again != cookie_;
      cookie_ = again;
    }
    NVST_REQUIRE(retry, "rank 0 at ", id.host, ":", id.port,
                 " refused this connection (wrong cookie, rank or world size: the unique id must "
                 "come from this job)");
  }
  watch_root_ = greet(kChannelWatch);
  NVST_REQUIRE(watch_root_.valid(), "rank 0 at ", id.host, ":", id.port, " refused this rank's watch connection");
}

void Bootstrap::accept_peers() {
  peers_.resize(static_cast<std::size_t>(world_));
  watch_peers_.resize(static_cast<std::size_t>(world_));
  struct Greeting {
    net::Fd fd;
    Hello hello{};
    std::size_t got = 0;
    net::Deadline until;
  };
  std::vector<Greeting> greeting;
  auto refuse = [&](Greeting& g, const char* why) {
    ++refused_;
    std::fprintf(stderr, "%srefused a bootstrap connection: %s\n", detail::rank_prefix().c_str(), why);
    g.fd.reset();
  };
  int joined = 0;  // connections of ranks 1.., two each
  const int wanted = 2 * (world_ - 1);
  auto deadline = net::deadline_after(timeout_s_);
  std::vector<pollfd> pfds;
  while (joined < wanted) {
    if (net::Clock::now() >= deadline) {
      std::ostringstream missing;
      for (int r = 1; r < world_; ++r)
        if (!peers_[static_cast<std::size_t>(r)].valid() || !watch_peers_[static_cast<std::size_t>(r)].valid())
          missing << " " << r;
      std::string msg =
          detail::concat("timed out after ", timeout_s_,
                         " s waiting for ranks to join the bootstrap; missing:", missing.str(), " (NVST_TIMEOUT_S)");
      broadcast_abort(msg, -1);
      NVST_FAIL(msg);
    }
    auto wake_at = deadline;
    pfds.assign(1, pollfd{listen_.get(), POLLIN, 0});
    for (auto& g : greeting) {
      pfds.push_back(pollfd{g.fd.get(), POLLIN, 0});
      wake_at = std::min(wake_at, g.until);
    }
    int rc = ::poll(pfds.data(), pfds.size(), net::ms_left(wake_at));
    if (rc < 0 && errno == EINTR) continue;
    NVST_CHECK_SYS(rc < 0 ? -1 : 0);
    for (std::size_t i = 0; i < greeting.size(); ++i) {
      Greeting& g = greeting[i];
      if (pfds[i + 1].revents != 0) {
        ssize_t n = ::recv(g.fd.get(), reinterpret_cast<char*>(&g.hello) + g.got, sizeof(Hello) - g.got, MSG_DONTWAIT);
        if (n <= 0 && !(n < 0 && (errno == EAGAIN || errno == EINTR))) {
          refuse(g, "closed before greeting");
          continue;
        }
        if (n > 0) g.got += static_cast<std::size_t>(n);
      }
      if (g.got < sizeof(Hello)) {
        if (net::Clock::now() >= g.until) refuse(g, "no greeting in time");
        continue;
      }
      const Hello& h = g.hello;
      if (h.magic != kMagic || h.version != kVersion || !same_cookie(h.cookie, cookie_.data())) {
        refuse(g, "wrong magic, version or cookie");
        continue;
      }
      auto& slots = h.channel == kChannelWatch ? watch_peers_ : peers_;
      if (h.world != world_ || h.rank <= 0 || h.rank >= world_ ||
          (h.channel != kChannelOps && h.channel != kChannelWatch) || slots[static_cast<std::size_t>(h.rank)].valid()) {
        std::string msg = detail::concat("bootstrap: a peer with the right cookie announced rank ", h.rank,
                                         " of world ", h.world, ", but this job has world ", world_,
                                         (h.rank > 0 && h.rank < world_ ? " and that rank already joined" : ""),
                                         ": check RANK/WORLD_SIZE");
        broadcast_abort(msg, -1);
        NVST_FAIL(msg);
      }
      std::uint32_t welcome = kWelcome;
      net::send_all(g.fd.get(), &welcome, sizeof(welcome));
      slots[static_cast<std::size_t>(h.rank)] = std::move(g.fd);
      ++joined;
    }
    std::erase_if(greeting, [](const Greeting& g) { return !g.fd.valid(); });
    if (pfds[0].revents != 0) {
      net::Fd conn = net::accept_until(listen_.get(), net::Clock::now());
      if (conn.valid()) {
        if (greeting.size() >= kMaxGreeting) {
          refuse(greeting.front(), "too many connections greeting at once");
          greeting.erase(greeting.begin());
        }
        greeting.push_back(Greeting{std::move(conn), {}, 0, net::deadline_after(kGreetingS)});
      }
    }
  }
}

std::string Bootstrap::failure() const {
  std::lock_guard<std::mutex> lock(failure_mu_);
  return failure_;
}

void Bootstrap::on_failure(std::function<void(const std::string&, int)> hook) {
  std::string already;
  int rank = -1;
  {
    std::lock_guard<std::mutex> lock(failure_mu_);
    hook_ = std::move(hook);
    already = failure_;
    rank = failed_rank_;
  }
  if (!already.empty() && hook_) hook_(already, rank);
}

bool Bootstrap::claim_failure(const std::string& why, int failed_rank) {
  std::lock_guard<std::mutex> lock(failure_mu_);
  if (claimed_) return false;
  claimed_ = true;
  claimed_why_ = why;
  claimed_rank_ = failed_rank;
  return true;
}

void Bootstrap::publish_failure() {
  std::function<void(const std::string&, int)> hook;
  std::string why;
  int rank = -1;
  {
    std::lock_guard<std::mutex> lock(failure_mu_);
    failure_ = why = claimed_why_;
    failed_rank_ = rank = claimed_rank_;
    hook = hook_;
  }
  failed_.store(true, std::memory_order_release);
  std::fprintf(stderr, "%s%s\n", detail::rank_prefix().c_str(), why.c_str());
  if (hook) hook(why, rank);
}

void Bootstrap::record_failure(const std::string& why, int failed_rank) {
  if (claim_failure(why, failed_rank)) publish_failure();
}

std::string Bootstrap::settle_failure() {
  const auto until = net::deadline_after(1.0);
  auto claimed = [this] {
    std::lock_guard<std::mutex> lock(failure_mu_);
    return claimed_;
  };
  while (!failed_.load(std::memory_order_acquire) && watching_.load() && net::Clock::now() < until &&
         (claimed() || notice_pending()))
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  return failure();
}

bool Bootstrap::notice_pending() {
  if (watch_reading_.load(std::memory_order_acquire)) return true;
  std::vector<pollfd> pfds;
  std::lock_guard<std::mutex> lock(watch_send_mu_);  // watch_peers_ changes under it
  if (rank_ == 0) {
    for (int r = 1; r < world_; ++r)
      if (watch_peers_[static_cast<std::size_t>(r)].valid())
        pfds.push_back(pollfd{watch_peers_[static_cast<std::size_t>(r)].get(), POLLIN, 0});
  } else {
    pfds.push_back(pollfd{watch_root_.get(), POLLIN, 0});
  }
  if (::poll(pfds.data(), pfds.size(), 0) <= 0) return false;
  return std::any_of(pfds.begin(), pfds.end(), [](const pollfd& p) { return p.revents != 0; });
}

std::string Bootstrap::report_failure(const std::string& why, int blamed) noexcept {
  try {
    if (world_ == 1 || !watching_.load()) return why;
    // What this PE found may be the echo of a failure another PE already
    // told of: a write to rank 0 fails because rank 0 exited right after
    // passing "rank k died" on. That notice (or a dead rank's watch closing)
    // is then waiting on the watch, and names the cause: let the watch
    // thread record it first.
    if (!failed_.load(std::memory_order_acquire) && notice_pending()) {
      const auto until = net::deadline_after(1.0);
      while (!failed_.load(std::memory_order_acquire) && watching_.load() && net::Clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    const int suspect = blamed >= 0 && blamed < world_ ? blamed : rank_;
    const std::string text = detail::concat("rank ", rank_, " failed: ", why);
    // Claimed first, so news the watch brings now cannot take its place;
    // published (this rank's waiters see it) only once the others are told.
    if (claim_failure(text, suspect)) {
      if (rank_ == 0) {
        tell_watchers(text, -1, suspect);
      } else {
        std::lock_guard<std::mutex> lock(watch_send_mu_);
        try {  // rank 0 names this rank; the frame's seq carries the suspect + 1
          send_frame(watch_root_.get(), Kind::kAbort, static_cast<std::uint32_t>(suspect + 1), why.data(), why.size());
        } catch (...) {
          // Rank 0 is gone; the others see that themselves.
        }
      }
      publish_failure();
    }
    // Another thread's claim is published in a moment.
    const auto until = net::deadline_after(1.0);
    while (!failed_.load(std::memory_order_acquire) && net::Clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::string f = failure();
    return f.empty() ? why : f;
  } catch (...) {
    return why;
  }
}

void Bootstrap::stop_watch() noexcept {
  if (!watching_.exchange(false)) return;
  const std::uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_.get(), &one, sizeof(one));
  if (watch_thread_.joinable()) watch_thread_.join();
}

// The watch thread. Rank 0: a rank's watch connection closing (or carrying
// its abort) is that rank's failure, passed on to every other rank. Other
// ranks: a message on the watch is such a failure; the watch closing is
// rank 0's.
void Bootstrap::watch_loop() {
  std::vector<pollfd> pfds;
  std::vector<int> ranks;
  for (;;) {
    pfds.assign(1, pollfd{wake_.get(), POLLIN, 0});
    ranks.assign(1, -1);
    if (rank_ == 0) {
      for (int r = 1; r < world_; ++r)
        if (watch_peers_[static_cast<std::size_t>(r)].valid()) {
          pfds.push_back(pollfd{watch_peers_[static_cast<std::size_t>(r)].get(), POLLIN, 0});
          ranks.push_back(r);
        }
    } else {
      pfds.push_back(pollfd{watch_root_.get(), POLLIN, 0});
      ranks.push_back(0);
    }
    int rc = ::poll(pfds.data(), pfds.size(), -1);
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0 || pfds[0].revents != 0 || !watching_.load()) return;
    // Until this round's news is recorded, report_failure waits for it.
    watch_reading_.store(true, std::memory_order_release);
    struct Done {
      std::atomic<bool>& flag;
      ~Done() { flag.store(false, std::memory_order_release); }
    } done{watch_reading_};
    for (std::size_t i = 1; i < pfds.size(); ++i) {
      if (pfds[i].revents == 0) continue;
      const int r = ranks[i];
      std::string why;
      int failed = r;  // rank 0: that rank unless it blames another; others: the rank rank 0 names
      try {
        Frame f = recv_frame(pfds[i].fd, net::deadline_after(1.0));
        if (f.io == net::Io::kOk && f.header.kind == Kind::kAbort) {
          why = rank_ == 0 ? detail::concat("rank ", r, " failed: ", as_text(f.payload)) : as_text(f.payload);
          // The frame's seq: the rank it blames + 1 (0: the sender itself).
          const int named = static_cast<int>(f.header.seq) - 1;
          if (named >= 0 && named < world_)
            failed = named;
          else if (rank_ != 0)
            failed = -1;
        } else if (f.io == net::Io::kOk) {
          continue;  // nothing else travels on the watch
        } else if (rank_ == 0) {
          why = detail::concat("rank ", r, " died (its bootstrap connection closed)");
        } else {
          why = "lost the bootstrap root (rank 0): it died or closed its connection";
        }
      } catch (const std::exception& e) {
        why = detail::concat("rank ", r, " broke its bootstrap watch connection: ", e.what());
      }
      if (!watching_.load()) return;  // the job is ending on purpose
      if (rank_ == 0) {
        std::lock_guard<std::mutex> lock(watch_send_mu_);
        watch_peers_[static_cast<std::size_t>(r)].reset();
      }
      // Claimed, told, then published (see report_failure). A failure
      // claimed already was told by whoever claimed it.
      if (claim_failure(why, failed)) {
        if (rank_ == 0) tell_watchers(why, r, failed);
        publish_failure();
      }
      if (rank_ != 0) return;  // nothing more can come from rank 0
    }
  }
}

std::vector<std::vector<std::byte>> Bootstrap::exchange(const void* data, std::size_t bytes, const char* what) {
  NVST_REQUIRE(!aborted_, "bootstrap: used after an earlier failure");
  NVST_REQUIRE(data != nullptr || bytes == 0, "bootstrap ", what, ": null data");
  if (failed_.load(std::memory_order_acquire)) {
    aborted_ = true;
    NVST_FAIL(failure(), " (entering ", what, ")");
  }
  ++seq_;
  if (world_ == 1) {
    const auto* p = static_cast<const std::byte*>(data);
    return {std::vector<std::byte>(p, p + bytes)};
  }
  try {
    if (rank_ == 0) {
      const auto* p = static_cast<const std::byte*>(data);
      return exchange_root(std::vector<std::byte>(p, p + bytes), what);
    }
    return exchange_client(data, bytes, what);
  } catch (...) {
    aborted_ = true;
    throw;
  }
}

std::vector<std::vector<std::byte>> Bootstrap::exchange_root(std::vector<std::byte> mine, const char* what) {
  std::vector<std::vector<std::byte>> all(static_cast<std::size_t>(world_));
  all[0] = std::move(mine);
  std::vector<bool> got(static_cast<std::size_t>(world_), false);
  got[0] = true;
  int pending = world_ - 1;
  auto deadline = net::deadline_after(timeout_s_);
  std::vector<pollfd> pfds;
  std::vector<int> ranks;
  while (pending > 0) {
    pfds.clear();
    ranks.clear();
    for (int r = 1; r < world_; ++r) {
      if (got[static_cast<std::size_t>(r)]) continue;
      pfds.push_back(pollfd{peers_[static_cast<std::size_t>(r)].get(), POLLIN, 0});
      ranks.push_back(r);
    }
    // In slices: a failure the watch learned of (a rank that died while
    // another, waiting on it elsewhere, keeps this one waiting) ends it.
    int rc = ::poll(pfds.data(), pfds.size(), net::ms_left(std::min(deadline, net::deadline_after(0.1))));
    if (rc < 0 && errno == EINTR) continue;
    NVST_CHECK_SYS(rc < 0 ? -1 : 0);
    if (rc == 0 && failed_.load(std::memory_order_acquire)) {
      const std::string msg = detail::concat(failure(), " (rank 0 in ", what, " #", seq_, ")");
      broadcast_abort(msg, -1);
      NVST_FAIL(msg);
    }
    if (rc == 0 && net::Clock::now() < deadline) continue;
    if (rc == 0) {
      std::ostringstream missing;
      for (int r : ranks) missing << " " << r;
      std::string msg = detail::concat("timed out after ", timeout_s_, " s in ", what, " #", seq_,
                                       " waiting for rank(s)", missing.str(), " (NVST_TIMEOUT_S)");
      broadcast_abort(msg, -1);
      NVST_FAIL(msg);
    }
    for (std::size_t i = 0; i < pfds.size(); ++i) {
      if (pfds[i].revents == 0) continue;
      int r = ranks[i];
      Frame f = recv_frame(pfds[i].fd, deadline);
      if (f.io == net::Io::kClosed) {
        // It may have left on news of another rank's death the watch passed
        // on: that is the cause to name.
        if (std::string known = settle_failure(); !known.empty()) {
          std::string msg = detail::concat(known, " (rank 0 in ", what, " #", seq_, ")");
          broadcast_abort(msg, -1);
          NVST_FAIL(msg);
        }
        std::string msg = detail::concat("rank ", r,
                                         " died (its bootstrap connection closed) while rank 0 "
                                         "waited for it in ",
                                         what, " #", seq_);
        broadcast_abort(msg, r);
        NVST_FAIL(msg);
      }
      if (f.io == net::Io::kTimeout) continue;  // the deadline check above reports it
      if (f.header.kind == Kind::kAbort) {
        std::string msg = detail::concat("rank ", r, " failed: ", as_text(f.payload));
        broadcast_abort(msg, r);
        NVST_FAIL(msg);
      }
      if (f.header.seq != seq_ || op_name(f.header) != std::string_view(what).substr(0, sizeof(f.header.op) - 1)) {
        std::string msg = detail::concat("rank ", r, " is in '", op_name(f.header), "' (bootstrap operation #",
                                         f.header.seq, ") while rank 0 is in '", what, "' (#", seq_,
                                         "): the PEs called collectives in different orders");
        broadcast_abort(msg, -1);
        NVST_FAIL(msg);
      }
      all[static_cast<std::size_t>(r)] = std::move(f.payload);
      got[static_cast<std::size_t>(r)] = true;
      --pending;
    }
  }
  // Reply: [u64 size per rank][payloads in rank order].
  std::vector<std::byte> reply(sizeof(std::uint64_t) * static_cast<std::size_t>(world_));
  for (int r = 0; r < world_; ++r) {
    std::uint64_t n = all[static_cast<std::size_t>(r)].size();
    std::memcpy(reply.data() + sizeof(n) * static_cast<std::size_t>(r), &n, sizeof(n));
  }
  for (auto& part : all) reply.insert(reply.end(), part.begin(), part.end());
  for (int r = 1; r < world_; ++r) {
    try {
      send_frame(peers_[static_cast<std::size_t>(r)].get(), Kind::kData, seq_, reply.data(), reply.size(), what);
    } catch (const Error&) {
      std::string known = settle_failure();
      std::string msg = known.empty()
                            ? detail::concat("rank ", r, " died before receiving the result of ", what, " #", seq_)
                            : detail::concat(known, " (rank 0 in ", what, " #", seq_, ")");
      broadcast_abort(msg, known.empty() ? r : -1);
      NVST_FAIL(msg);
    }
  }
  return all;
}

// Rank 0 closing can overtake the failure it passed on just before it
// exited (on the watch connection, another socket): give the watch a
// moment to record it, so this rank names the cause, not only rank 0.
void Bootstrap::fail_root_lost(const char* when, const char* what) {
  for (int i = 0; i < 100 && !failed_.load(std::memory_order_acquire); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (failed_.load(std::memory_order_acquire)) NVST_FAIL(failure(), " (", when, " ", what, " #", seq_, ")");
  NVST_FAIL("lost the bootstrap root (rank 0) ", when, " ", what, " #", seq_, ": it died or closed its connection");
}

std::vector<std::vector<std::byte>> Bootstrap::exchange_client(const void* data, std::size_t bytes, const char* what) {
  auto deadline = net::deadline_after(timeout_s_);
  try {
    send_frame(root_.get(), Kind::kData, seq_, data, bytes, what);
  } catch (const Error&) {
    fail_root_lost("entering", what);
  }
  // Wait in slices: a failure the watch learned of (a PE that died while
  // rank 0 does not wait for it) ends this wait too.
  while (net::wait_readable(root_.get(), std::min(deadline, net::deadline_after(0.1))) == net::Io::kTimeout &&
         net::Clock::now() < deadline) {
    if (failed_.load(std::memory_order_acquire)) NVST_FAIL(failure(), " (in ", what, " #", seq_, ")");
  }
  Frame f = recv_frame(root_.get(), deadline);
  if (f.io == net::Io::kClosed) fail_root_lost("in", what);
  if (f.io == net::Io::kTimeout)
    NVST_FAIL("timed out after ", timeout_s_, " s in ", what, " #", seq_,
              " waiting for rank 0 (NVST_TIMEOUT_S); some rank has not arrived");
  if (f.header.kind == Kind::kAbort) NVST_FAIL(as_text(f.payload));
  NVST_REQUIRE(f.header.seq == seq_, "bootstrap reply for '", op_name(f.header), "' (#", f.header.seq, ") while in '",
               what, "' (#", seq_, ")");
  const std::size_t head = sizeof(std::uint64_t) * static_cast<std::size_t>(world_);
  NVST_REQUIRE(f.payload.size() >= head, "short bootstrap reply");
  std::vector<std::vector<std::byte>> all(static_cast<std::size_t>(world_));
  std::size_t off = head;
  for (int r = 0; r < world_; ++r) {
    std::uint64_t n;
    std::memcpy(&n, f.payload.data() + sizeof(n) * static_cast<std::size_t>(r), sizeof(n));
    NVST_REQUIRE(off + n <= f.payload.size(), "truncated bootstrap reply");
    all[static_cast<std::size_t>(r)].assign(f.payload.begin() + static_cast<long>(off),
                                            f.payload.begin() + static_cast<long>(off + n));
    off += n;
  }
  return all;
}

std::vector<std::byte> Bootstrap::allgather(const void* data, std::size_t bytes, const char* what) {
  auto all = exchange(data, bytes, what);
  bool same = std::all_of(all.begin(), all.end(), [&](const auto& part) { return part.size() == bytes; });
  if (!same) {
    std::ostringstream sizes;
    for (int r = 0; r < world_; ++r)
      sizes << (r ? ", " : "") << "rank " << r << ": " << all[static_cast<std::size_t>(r)].size();
    NVST_FAIL(what, ": ranks passed different sizes (", sizes.str(), " bytes)");
  }
  std::vector<std::byte> out;
  out.reserve(bytes * static_cast<std::size_t>(world_));
  for (auto& part : all) out.insert(out.end(), part.begin(), part.end());
  return out;
}

void Bootstrap::broadcast(void* data, std::size_t bytes, int root, const char* what) {
  NVST_REQUIRE(root >= 0 && root < world_, what, ": root ", root, " out of range [0, ", world_, ")");
  NVST_REQUIRE(data != nullptr || bytes == 0, what, ": null data for ", bytes, " bytes");
  // Every rank sends its size and root; the root also sends the data.
  struct Shape {
    std::uint64_t bytes;
    std::int64_t root;
  } shape{bytes, root};
  std::vector<std::byte> mine(sizeof(shape));
  std::memcpy(mine.data(), &shape, sizeof(shape));
  if (rank_ == root && bytes) {
    const auto* p = static_cast<const std::byte*>(data);
    mine.insert(mine.end(), p, p + bytes);
  }
  auto all = exchange(mine.data(), mine.size(), what);
  for (int r = 0; r < world_; ++r) {
    Shape theirs{};
    NVST_REQUIRE(all[static_cast<std::size_t>(r)].size() >= sizeof(theirs), what, ": short contribution of rank ", r);
    std::memcpy(&theirs, all[static_cast<std::size_t>(r)].data(), sizeof(theirs));
    NVST_REQUIRE(theirs.bytes == bytes && theirs.root == root, what, ": rank ", r, " broadcasts ", theirs.bytes,
                 " bytes from root ", theirs.root, " but rank ", rank_, " expects ", bytes, " bytes from root ", root);
  }
  if (rank_ != root && bytes) std::memcpy(data, all[static_cast<std::size_t>(root)].data() + sizeof(Shape), bytes);
}

void Bootstrap::barrier(const char* what) { exchange(nullptr, 0, what); }

void Bootstrap::broadcast_abort(const std::string& reason, int skip_rank) noexcept {
  aborted_ = true;
  for (int r = 1; r < static_cast<int>(peers_.size()); ++r) {
    if (r == skip_rank || !peers_[static_cast<std::size_t>(r)].valid()) continue;
    try {
      send_frame(peers_[static_cast<std::size_t>(r)].get(), Kind::kAbort, seq_, reason.data(), reason.size());
    } catch (...) {
      // That rank is gone too; nothing more to tell it.
    }
  }
  // On the watch too: a rank outside the bootstrap (in a signal wait, say)
  // learns the reason before it sees rank 0 go.
  tell_watchers(reason, skip_rank, skip_rank);
}

// The frame's seq carries the failed rank + 1 (0: unknown).
void Bootstrap::tell_watchers(const std::string& reason, int skip_rank, int failed_rank) noexcept {
  std::lock_guard<std::mutex> lock(watch_send_mu_);  // one frame at a time on each connection
  for (int r = 1; r < static_cast<int>(watch_peers_.size()); ++r) {
    if (r == skip_rank || !watch_peers_[static_cast<std::size_t>(r)].valid()) continue;
    try {
      send_frame(watch_peers_[static_cast<std::size_t>(r)].get(), Kind::kAbort,
                 static_cast<std::uint32_t>(failed_rank + 1), reason.data(), reason.size());
    } catch (...) {
      // That rank is gone too; its own closing reports it.
    }
  }
}

void Bootstrap::abort(const std::string& reason) noexcept {
  if (aborted_ || world_ == 1) return;
  aborted_ = true;
  if (rank_ == 0) {
    broadcast_abort("rank 0 failed: " + reason, -1);
    return;
  }
  std::lock_guard<std::mutex> lock(watch_send_mu_);
  for (int fd : {root_.get(), watch_root_.get()}) {
    try {  // on the watch, seq 0: the failure is this rank's own
      if (fd >= 0) send_frame(fd, Kind::kAbort, fd == root_.get() ? seq_ : 0, reason.data(), reason.size());
    } catch (...) {
    }
  }
}

}  // namespace nvst
