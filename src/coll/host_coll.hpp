// Collectives on host-memory PEs (no GPU): the same algorithms as the
// GPU kernels, on the host API. Used by coll.cu when nvst::device() < 0.
// Each PE put_signals its chunk into slot `me` of every member's workspace
// (through the proxy and the fabric), waits for every member's signal, and
// reduces on the CPU in team order with the GPU's rounding. Epochs, parity
// and the reuse argument are those of the GPU kernels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "coll/coll_internal.hpp"

namespace nvst::coll::internal {

struct HostWorkspace {
  std::uint64_t generation = 0;
  std::size_t slot = 0;
  char* data[2] = {};
  std::uint64_t* flags = nullptr;  // flags[p]: last epoch member p's data arrived here
  // all_to_allv, [p]: member p's round flag, ack and byte count (as the kernel's).
  std::uint64_t *vdata = nullptr, *vack = nullptr, *vlen = nullptr;
  std::uint64_t* vring = nullptr;       // ring, [p]: the last step member p sent here
  std::size_t chunk = 0;                // bytes of each data[] buffer
  std::vector<std::uint64_t> vlen_src;  // what this PE sends as byte counts (kept until quiet)
  std::uint64_t epoch = 0;
};

// Makes team `handle`'s workspace unless this init already did (a
// collective allocation: every PE calls it).
void host_prepare(int handle, int npes, std::size_t chunk);
// The team's workspace; the world's is made on first use (workspace_of).
HostWorkspace& host_workspace(const char* fn, const TeamView& t);

// What a host collective needs: the team, its workspace, the call.
struct HostCall {
  const TeamView& t;
  HostWorkspace& w;
  CallSig sig;
};

// Sends `bytes` of src + p * stride to every member p's slot, waits for
// theirs; returns this epoch's buffer (slot p holds member p's bytes).
// only_from >= 0 (broadcast): only that member sends data; only_to >= 0
// (reduce): data goes to that member only. Everyone signals everyone.
const char* host_exchange(const HostCall& c, const char* src, std::size_t stride, std::size_t bytes, int only_from = -1,
                          int only_to = -1);
// all_reduce by the ring (all_reduce's Algo::kRing on host PEs).
void host_ring_all_reduce(const HostCall& c, const char* in, char* out, std::size_t count, DType dtype, RedOp op);
// Every member pushes its part for member p (in + p * stride) to p, or to
// `dest` only (>= 0), which reduces: all_reduce, reduce_scatter, reduce.
void host_push_reduce(const HostCall& c, const char* in, std::size_t stride, char* out, std::size_t count, DType dtype,
                      RedOp op, int dest);
void host_broadcast(const HostCall& c, const char* in, char* out, std::size_t total, int root);
void host_all_to_all(const HostCall& c, const char* in, std::size_t in_stride, char* out, std::size_t total);
// Offsets and lengths in bytes.
void host_all_to_allv(const HostCall& c, const char* in, const std::size_t* send_off, const std::size_t* send_len,
                      char* out, const std::size_t* recv_off, const std::size_t* recv_len);

}  // namespace nvst::coll::internal
