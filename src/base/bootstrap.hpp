// Bootstrap: how PEs find each other before any GPU memory is shared.
//
// Rank 0 listens on TCP; the unique ID names its address and port and a
// random 16-byte cookie. Every other rank connects and presents the cookie;
// a connection without it is dropped (and logged) and the job goes on.
// After that, collectives (exchange, allgather, broadcast, barrier) run as a
// star through rank 0: small, simple, and enough for set-up traffic.
//
// Failure handling: every wait has a deadline (NVST_TIMEOUT_S). When rank 0
// sees a peer's connection close during a collective it tells every other
// rank which rank died, and all of them throw nvst::Error naming it; when a
// rank loses rank 0 it says so. A dead peer is therefore reported as soon as
// the others next enter a collective, not after the timeout.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/socket.hpp"

namespace nvst {

struct UniqueId {
  std::string host;        // rank 0's address as the others reach it
  std::uint16_t port = 0;  // rank 0's bootstrap port
  std::array<std::uint8_t, 16> cookie{};

  // A new ID for a job whose rank 0 runs on this host's loopback interface.
  static UniqueId create_loopback();
  // A new ID whose rank 0 runs on this host and is reached at `host` (a
  // port free on every interface; "127.0.0.1"/"localhost" = loopback).
  static UniqueId create_for_host(const std::string& host);
  // Text form, safe for an environment variable: "nvst1:HOST:PORT:COOKIEHEX".
  std::string to_string() const;
  static UniqueId parse(const std::string& text);
};

// Random bytes from the kernel (getrandom).
std::array<std::uint8_t, 16> random_cookie();

class Bootstrap {
 public:
  // Collective over `world` processes. Rank 0 listens, the others connect.
  Bootstrap(const UniqueId& id, int rank, int world, double timeout_s);
  ~Bootstrap();
  Bootstrap(const Bootstrap&) = delete;
  Bootstrap& operator=(const Bootstrap&) = delete;

  int rank() const { return rank_; }
  int world() const { return world_; }

  // Every rank contributes a buffer (sizes may differ); every rank receives
  // all of them, indexed by rank. `what` names the operation in errors.
  std::vector<std::vector<std::byte>> exchange(const void* data, std::size_t bytes,
                                               const char* what);
  // Same-size contributions concatenated in rank order; a size mismatch
  // throws on every rank, naming each rank's size.
  std::vector<std::byte> allgather(const void* data, std::size_t bytes, const char* what);
  void broadcast(void* data, std::size_t bytes, int root, const char* what);
  void barrier(const char* what);

  // Tells the others this rank is failing (best effort), so they report the
  // reason instead of a closed connection.
  void abort(const std::string& reason) noexcept;

  // Connections refused because of a wrong cookie or malformed greeting.
  int refused_connections() const { return refused_; }

 private:
  std::vector<std::vector<std::byte>> exchange_root(std::vector<std::byte> mine,
                                                    const char* what);
  std::vector<std::vector<std::byte>> exchange_client(const void* data, std::size_t bytes,
                                                      const char* what);
  void accept_peers(const UniqueId& id);
  void broadcast_abort(const std::string& reason, int skip_rank) noexcept;

  int rank_;
  int world_;
  double timeout_s_;
  std::uint32_t seq_ = 0;
  int refused_ = 0;
  bool aborted_ = false;
  net::Fd listen_;                 // rank 0
  std::vector<net::Fd> peers_;     // rank 0: one per rank (peers_[0] unused)
  net::Fd root_;                   // other ranks
};

}  // namespace nvst
