#include "base/bootstrap.hpp"

#include <poll.h>
#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "nvst/error.hpp"

namespace nvst {

namespace {

constexpr std::uint32_t kMagic = 0x5453564e;  // "NVST"
constexpr std::uint32_t kVersion = 1;

struct Hello {
  std::uint32_t magic;
  std::uint32_t version;
  std::uint8_t cookie[16];
  std::int32_t rank;
  std::int32_t world;
};
static_assert(sizeof(Hello) == 32);

enum : std::uint32_t { kWelcome = 0x57454c43 };  // root's reply to a good hello

enum class Kind : std::uint32_t { kData = 1, kAbort = 2 };

struct FrameHeader {
  Kind kind;
  std::uint32_t seq;
  std::uint64_t bytes;
};
static_assert(sizeof(FrameHeader) == 16);

// Frames larger than this are a protocol error, not a request to allocate.
constexpr std::uint64_t kMaxFrameBytes = std::uint64_t{1} << 32;

void send_frame(int fd, Kind kind, std::uint32_t seq, const void* data, std::size_t bytes) {
  FrameHeader h{kind, seq, bytes};
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
  NVST_REQUIRE(f.header.bytes <= kMaxFrameBytes, "bootstrap frame of ", f.header.bytes,
               " bytes: protocol error");
  f.payload.resize(f.header.bytes);
  if (f.header.bytes) f.io = net::recv_all(fd, f.payload.data(), f.header.bytes, deadline);
  return f;
}

std::string as_text(const std::vector<std::byte>& b) {
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

std::string hex(const std::uint8_t* p, std::size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (std::size_t i = 0; i < n; ++i) {
    s += digits[p[i] >> 4];
    s += digits[p[i] & 15];
  }
  return s;
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
  NVST_REQUIRE(!host.empty() && host.find(':') == std::string::npos,
               "nvst::new_unique_id: host '", host, "' must be a host name or IPv4 address");
  if (host == "127.0.0.1" || host == "localhost") return create_loopback();
  UniqueId id;
  id.host = host;
  net::listen_tcp(false, 0, &id.port);  // a port free on every interface (closed again)
  id.cookie = random_cookie();
  return id;
}

std::string UniqueId::to_string() const {
  return "nvst1:" + host + ":" + std::to_string(port) + ":" + hex(cookie.data(), cookie.size());
}

UniqueId UniqueId::parse(const std::string& text) {
  auto bad = [&](const char* why) {
    NVST_FAIL("malformed unique id '", text, "': ", why,
              " (expected nvst1:HOST:PORT:32-hex-digit-cookie)");
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
    : rank_(rank), world_(world), timeout_s_(timeout_s) {
  NVST_REQUIRE(world >= 1, "bootstrap: world size must be >= 1, got ", world);
  NVST_REQUIRE(rank >= 0 && rank < world, "bootstrap: rank ", rank, " out of range [0, ", world,
               ")");
  NVST_REQUIRE(timeout_s > 0, "bootstrap: timeout must be > 0");
  if (world == 1) return;
  if (rank == 0) {
    bool loopback = id.host.rfind("127.", 0) == 0 || id.host == "localhost";
    listen_ = net::listen_tcp(loopback, id.port, nullptr);
    accept_peers(id);
    return;
  }
  auto deadline = net::deadline_after(timeout_s_);
  root_ = net::connect_tcp(id.host, id.port, deadline);
  Hello h{kMagic, kVersion, {}, rank, world};
  std::memcpy(h.cookie, id.cookie.data(), 16);
  net::send_all(root_.get(), &h, sizeof(h));
  std::uint32_t welcome = 0;
  net::Io io = net::recv_all(root_.get(), &welcome, sizeof(welcome), deadline);
  NVST_REQUIRE(io != net::Io::kClosed,
               "rank 0 at ", id.host, ":", id.port,
               " refused this connection (wrong cookie, rank or world size: the unique id must "
               "come from this job)");
  NVST_REQUIRE(io == net::Io::kOk, "timed out after ", timeout_s_,
               " s waiting for rank 0 to accept this rank (NVST_TIMEOUT_S)");
  NVST_REQUIRE(welcome == kWelcome, "rank 0 sent a malformed greeting");
}

Bootstrap::~Bootstrap() = default;

void Bootstrap::accept_peers(const UniqueId& id) {
  peers_.resize(static_cast<std::size_t>(world_));
  int joined = 1;
  auto deadline = net::deadline_after(timeout_s_);
  while (joined < world_) {
    net::Fd conn = net::accept_until(listen_.get(), deadline);
    if (!conn.valid()) {
      if (net::Clock::now() < deadline) continue;
      std::ostringstream missing;
      for (int r = 1; r < world_; ++r)
        if (!peers_[static_cast<std::size_t>(r)].valid()) missing << " " << r;
      std::string msg = detail::concat("timed out after ", timeout_s_,
                                       " s waiting for ranks to join the bootstrap; missing:",
                                       missing.str(), " (NVST_TIMEOUT_S)");
      broadcast_abort(msg, -1);
      NVST_FAIL(msg);
    }
    // A stranger gets a few seconds to greet, not the whole job's timeout.
    auto greet_deadline = std::min(deadline, net::deadline_after(5.0));
    Hello h{};
    net::Io io = net::recv_all(conn.get(), &h, sizeof(h), greet_deadline);
    if (io != net::Io::kOk || h.magic != kMagic || h.version != kVersion ||
        !same_cookie(h.cookie, id.cookie.data())) {
      ++refused_;
      std::fprintf(stderr, "%srefused a bootstrap connection: %s\n",
                   detail::rank_prefix().c_str(),
                   io != net::Io::kOk ? "no greeting" : "wrong magic, version or cookie");
      continue;  // conn closes here
    }
    if (h.world != world_ || h.rank <= 0 || h.rank >= world_ ||
        peers_[static_cast<std::size_t>(h.rank)].valid()) {
      std::string msg = detail::concat(
          "bootstrap: a peer with the right cookie announced rank ", h.rank, " of world ",
          h.world, ", but this job has world ", world_,
          (h.rank > 0 && h.rank < world_ ? " and that rank already joined" : ""),
          ": check RANK/WORLD_SIZE");
      broadcast_abort(msg, -1);
      NVST_FAIL(msg);
    }
    std::uint32_t welcome = kWelcome;
    net::send_all(conn.get(), &welcome, sizeof(welcome));
    peers_[static_cast<std::size_t>(h.rank)] = std::move(conn);
    ++joined;
  }
}

std::vector<std::vector<std::byte>> Bootstrap::exchange(const void* data, std::size_t bytes,
                                                        const char* what) {
  NVST_REQUIRE(!aborted_, "bootstrap: used after an earlier failure");
  NVST_REQUIRE(data != nullptr || bytes == 0, "bootstrap ", what, ": null data");
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

std::vector<std::vector<std::byte>> Bootstrap::exchange_root(std::vector<std::byte> mine,
                                                             const char* what) {
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
    int rc = ::poll(pfds.data(), pfds.size(), net::ms_left(deadline));
    if (rc < 0 && errno == EINTR) continue;
    NVST_CHECK_SYS(rc < 0 ? -1 : 0);
    if (rc == 0) {
      std::ostringstream missing;
      for (int r : ranks) missing << " " << r;
      std::string msg = detail::concat("timed out after ", timeout_s_, " s in ", what, " #",
                                       seq_, " waiting for rank(s)", missing.str(),
                                       " (NVST_TIMEOUT_S)");
      broadcast_abort(msg, -1);
      NVST_FAIL(msg);
    }
    for (std::size_t i = 0; i < pfds.size(); ++i) {
      if (pfds[i].revents == 0) continue;
      int r = ranks[i];
      Frame f = recv_frame(pfds[i].fd, deadline);
      if (f.io == net::Io::kClosed) {
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
      if (f.header.seq != seq_) {
        std::string msg = detail::concat("rank ", r, " is in bootstrap operation #",
                                         f.header.seq, " while rank 0 is in ", what, " #", seq_,
                                         ": the PEs called collectives in different orders");
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
      send_frame(peers_[static_cast<std::size_t>(r)].get(), Kind::kData, seq_, reply.data(),
                 reply.size());
    } catch (const Error&) {
      std::string msg =
          detail::concat("rank ", r, " died before receiving the result of ", what, " #", seq_);
      broadcast_abort(msg, r);
      NVST_FAIL(msg);
    }
  }
  return all;
}

std::vector<std::vector<std::byte>> Bootstrap::exchange_client(const void* data,
                                                               std::size_t bytes,
                                                               const char* what) {
  auto deadline = net::deadline_after(timeout_s_);
  try {
    send_frame(root_.get(), Kind::kData, seq_, data, bytes);
  } catch (const Error&) {
    NVST_FAIL("lost the bootstrap root (rank 0) entering ", what, " #", seq_,
              ": it died or closed its connection");
  }
  Frame f = recv_frame(root_.get(), deadline);
  if (f.io == net::Io::kClosed)
    NVST_FAIL("lost the bootstrap root (rank 0) in ", what, " #", seq_,
              ": it died or closed its connection");
  if (f.io == net::Io::kTimeout)
    NVST_FAIL("timed out after ", timeout_s_, " s in ", what, " #", seq_,
              " waiting for rank 0 (NVST_TIMEOUT_S); some rank has not arrived");
  if (f.header.kind == Kind::kAbort) NVST_FAIL(as_text(f.payload));
  NVST_REQUIRE(f.header.seq == seq_, "bootstrap reply for operation #", f.header.seq,
               " while in ", what, " #", seq_);
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

std::vector<std::byte> Bootstrap::allgather(const void* data, std::size_t bytes,
                                            const char* what) {
  auto all = exchange(data, bytes, what);
  bool same = std::all_of(all.begin(), all.end(),
                          [&](const auto& part) { return part.size() == bytes; });
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
  NVST_REQUIRE(root >= 0 && root < world_, what, ": root ", root, " out of range [0, ", world_,
               ")");
  // Every rank sends its size; the root also sends the data.
  std::vector<std::byte> mine(sizeof(std::uint64_t));
  std::uint64_t n = bytes;
  std::memcpy(mine.data(), &n, sizeof(n));
  if (rank_ == root && bytes) {
    const auto* p = static_cast<const std::byte*>(data);
    mine.insert(mine.end(), p, p + bytes);
  }
  auto all = exchange(mine.data(), mine.size(), what);
  for (int r = 0; r < world_; ++r) {
    std::uint64_t theirs;
    std::memcpy(&theirs, all[static_cast<std::size_t>(r)].data(), sizeof(theirs));
    NVST_REQUIRE(theirs == bytes, what, ": rank ", r, " broadcasts ", theirs,
                 " bytes but this rank expects ", bytes);
  }
  if (rank_ != root && bytes)
    std::memcpy(data, all[static_cast<std::size_t>(root)].data() + sizeof(std::uint64_t), bytes);
}

void Bootstrap::barrier(const char* what) { exchange(nullptr, 0, what); }

void Bootstrap::broadcast_abort(const std::string& reason, int skip_rank) noexcept {
  aborted_ = true;
  for (int r = 1; r < static_cast<int>(peers_.size()); ++r) {
    if (r == skip_rank || !peers_[static_cast<std::size_t>(r)].valid()) continue;
    try {
      send_frame(peers_[static_cast<std::size_t>(r)].get(), Kind::kAbort, seq_, reason.data(),
                 reason.size());
    } catch (...) {
      // That rank is gone too; nothing more to tell it.
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
  try {
    send_frame(root_.get(), Kind::kAbort, seq_, reason.data(), reason.size());
  } catch (...) {
  }
}

}  // namespace nvst
