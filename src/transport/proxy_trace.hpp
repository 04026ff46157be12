// A timeline of the proxy's inbox path, for finding where a put's time goes
// (docs/06, "Reading a put's timeline"). NVST_PROXY_TRACE=PREFIX makes each
// proxy record what happened to every piece (staged, posted, landed, ...)
// with the steady clock, which all processes of a host share, and write the
// first kMaxEvents to PREFIX.RANK when it finishes; scripts/proxy_trace.py
// lines the two sides up per piece. Off (the default) it costs one branch.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace nvst {

class ProxyTrace {
 public:
  // What happened. Sender: a command taken (from the host's or the kernels'
  // FIFO; a put its producer staged: its first piece), a piece of a command
  // staged (its header written in front of its data), or a request for
  // acks staged (a header-only piece a waiting quiet sends on its own, so
  // not a command's), the piece posted, its write completed, the quiet
  // released.
  // Target: a piece's doorbell, its landing copy queued, seen done, its ack
  // posted.
  enum What : std::uint8_t {
    kTaken,
    kTakenFromKernel,
    kStaged,
    kPosted,
    kWritten,
    kQuietDone,
    kRequested,  // sender
    kBell,
    kLanding,
    kLanded,
    kAcked  // target
  };

  explicit ProxyTrace(std::string path) : path_(std::move(path)) {
    if (on()) events_.reserve(kMaxEvents);
  }
  bool on() const { return !path_.empty(); }

  void add(What what, int pe, std::uint64_t seq) {
    if (!on() || events_.size() >= kMaxEvents) return;
    events_.push_back({std::chrono::steady_clock::now().time_since_epoch().count(), seq, pe, what});
  }

  // One line per event: ns, what, pe, seq. For taken / taken_dev the last
  // field is the command's bytes (0 for a signal), for quiet_done the
  // quiet's ticket (pe -1); for the others the piece's seq from its sender.
  void write(int rank) const {
    if (!on()) return;
    const std::string file = path_ + "." + std::to_string(rank);
    std::FILE* f = std::fopen(file.c_str(), "w");
    if (f == nullptr) {
      std::fprintf(stderr, "proxy trace: cannot write %s\n", file.c_str());
      return;
    }
    static const char* names[] = {"taken",     "taken_dev", "staged",  "posted", "written", "quiet_done",
                                  "requested", "bell",      "landing", "landed", "acked"};
    for (const Event& e : events_)
      std::fprintf(f, "%lld %s %d %llu\n", static_cast<long long>(e.ns), names[e.what], e.pe,
                   static_cast<unsigned long long>(e.seq));
    std::fclose(f);
  }

 private:
  static constexpr std::size_t kMaxEvents = 1 << 20;
  struct Event {
    std::int64_t ns;
    std::uint64_t seq;
    int pe;
    What what;
  };
  std::string path_;
  std::vector<Event> events_;
};

}  // namespace nvst
