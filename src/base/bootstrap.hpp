// Bootstrap: how PEs find each other before any GPU memory is shared.
//
// Rank 0 listens on TCP; the unique ID names its address and port and a
// random 16-byte cookie. Every other rank connects and presents the cookie;
// a connection without it is dropped (and logged) and the job goes on.
// Rank 0 greets all newcomers at once, each with a short deadline, so idle
// or garbage connections cannot hold up the ranks that do greet.
// After that, collectives (exchange, allgather, broadcast, barrier) run as a
// star through rank 0: small, simple, and enough for set-up traffic. Each
// frame names its operation and sequence number, so PEs that call different
// operations fail, naming both, instead of pairing one with the other.
//
// Failure handling: every wait has a deadline (NVST_TIMEOUT_S). Besides its
// connection for collectives, every rank keeps a second one to rank 0, the
// watch, that carries nothing until a PE dies: rank 0 sees that rank's
// watch close at once (the kernel closes a dead process's sockets) and tells
// every other rank, whose watch thread records it (failure()) and calls the
// on_failure hook, so waits outside the bootstrap (signals, quiet,
// collectives) end naming the dead rank too. A rank that loses rank 0's
// watch reports rank 0 dead.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/socket.hpp"

namespace nvst {

struct UniqueId {
  std::string host;        // rank 0's address as the others reach it
  std::uint16_t port = 0;  // rank 0's bootstrap port
  std::array<std::uint8_t, 16> cookie{};
  // Not part of the text form: where a torchrun/mpirun job on one host
  // passes its cookie (launch_env.cpp). Rank 0 writes a fresh one there and
  // removes the file once every rank joined; the others read it.
  std::string cookie_file;

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
  std::vector<std::vector<std::byte>> exchange(const void* data, std::size_t bytes, const char* what);
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
  // The job's secret (from the unique ID, NVST_COOKIE or rank 0's file).
  const std::array<std::uint8_t, 16>& cookie() const { return cookie_; }

  // A PE's death (or failure) the watch learned of; "" while there is none.
  std::string failure() const;
  // Called once, on the watch thread, when the watch learns of a failure:
  // its text and the rank that died or failed (-1: unknown). Set it before
  // the failure can matter (right after construction).
  void on_failure(std::function<void(const std::string&, int)> hook);
  // A failure found outside the bootstrap (a PE's proxy lost a peer): told
  // to every other rank through the watch, and recorded here, blaming
  // `blamed` (-1: this rank). A notice already waiting on the watch (the
  // cause another PE told of) is recorded first instead. Thread-safe;
  // nothing new once a failure is known. Returns the job's failure as
  // recorded (`why` when the watch is stopped).
  std::string report_failure(const std::string& why, int blamed = -1) noexcept;
  // Stops watching: the job is ending on purpose, so connections that close
  // from now on are no failure. Called before the last barrier.
  void stop_watch() noexcept;

 private:
  std::vector<std::vector<std::byte>> exchange_root(std::vector<std::byte> mine, const char* what);
  [[noreturn]] void fail_root_lost(const char* when, const char* what);
  std::vector<std::vector<std::byte>> exchange_client(const void* data, std::size_t bytes, const char* what);
  void accept_peers();
  void connect_to_root(const UniqueId& id);
  void broadcast_abort(const std::string& reason, int skip_rank) noexcept;
  void tell_watchers(const std::string& reason, int skip_rank, int failed_rank) noexcept;
  void watch_loop();
  // A failure is first claimed (the first claim wins; nothing sees it
  // yet), then, once the other ranks were told, published: failure() and
  // the hook see it. So a waiter here never ends (and exits) on a failure
  // the others have not heard of.
  bool claim_failure(const std::string& why, int failed_rank);
  void publish_failure();
  void record_failure(const std::string& why, int failed_rank);  // claim and publish
  // Whether the watch has news it has not recorded yet.
  bool notice_pending();
  // The failure the watch knows of, or is about to (claimed, or news not
  // read yet: waits up to 1 s for it); "" when there is none.
  std::string settle_failure();

  int rank_;
  int world_;
  double timeout_s_;
  std::uint32_t seq_ = 0;
  int refused_ = 0;
  bool aborted_ = false;
  net::Fd listen_;              // rank 0
  std::vector<net::Fd> peers_;  // rank 0: one per rank (peers_[0] unused)
  net::Fd root_;                // other ranks
  std::array<std::uint8_t, 16> cookie_{};
  std::vector<net::Fd> watch_peers_;  // rank 0: each rank's watch connection
  net::Fd watch_root_;                // other ranks: the watch to rank 0
  net::Fd wake_;                      // eventfd that stops the watch thread
  std::thread watch_thread_;
  std::mutex watch_send_mu_;  // rank 0: sends on (and resets of) watch_peers_
  mutable std::mutex failure_mu_;
  bool claimed_ = false;
  std::string claimed_why_;
  int claimed_rank_ = -1;
  std::string failure_;  // published
  int failed_rank_ = -1;
  std::function<void(const std::string&, int)> hook_;
  std::atomic<bool> failed_{false};
  std::atomic<bool> watching_{false};
  std::atomic<bool> watch_reading_{false};  // the watch thread is reading news (notice_pending)
};

}  // namespace nvst
