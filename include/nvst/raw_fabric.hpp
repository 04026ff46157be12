// The raw libfabric baseline of the inter-node benchmarks (`nvst bench p2p`
// across logical nodes, `nvst bench host`): PE 0 fi_writes a host buffer
// into PE 1's over the provider the proxy uses, one write in flight, each
// waited for; and a ping-pong of 8-byte writes, each side polling its
// provider for the other's. No GPU, no staging, no protocol: the ceiling a
// proxy over that provider can approach.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

namespace nvst {

class RawFabric {
 public:
  struct Result {
    std::vector<double> us;  // microseconds per write of each timed sample (PE 0's, on every PE)
    long long wrong;         // bytes PE 1 found different from what PE 0 wrote
  };

  // Collective, after nvst::init: every PE constructs it (the transport
  // exchanges addresses); PEs other than 0 and 1 only take part in its
  // barriers. Writes of up to `max_bytes`.
  explicit RawFabric(std::size_t max_bytes);
  ~RawFabric();
  RawFabric(const RawFabric&) = delete;
  RawFabric& operator=(const RawFabric&) = delete;

  // Collective: `samples` + 1 samples (the first a warm-up) of `iters`
  // writes of `bytes` (<= max_bytes); the data is checked on PE 1 afterwards.
  Result measure(std::size_t bytes, int iters, int samples);
  // Collective: one-way microseconds of an 8-byte write in a ping-pong
  // between PEs 0 and 1, per timed sample of `iters` round trips.
  std::vector<double> pingpong(int iters, int samples);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace nvst
