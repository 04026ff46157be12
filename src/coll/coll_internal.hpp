// Internals the collectives' files share: coll.cu (the API, argument
// checks, workspaces and launches), kernels.cuh (the GPU kernels) and
// host_coll.cpp (the same algorithms for host-memory PEs).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include <cuda_runtime_api.h>  // __host__ __device__ for a host compiler

#include "nvst/coll.hpp"
#include "nvst/error.hpp"
#include "nvst/nvst.hpp"
#include "runtime/runtime_internal.hpp"

namespace nvst::coll::internal {

constexpr int kMaxBlocks = 264;
constexpr int kMaxPes = 64;
constexpr int kThreads = 1024;  // the most a launch uses (see threads_for)
constexpr std::size_t kOneShotMax = std::size_t{256} << 10;
// Low-latency all_reduce (kernels.cuh): at most this many bytes per PE and
// launch; its buffers hold 2 x this per member (16-byte lines carry 8).
constexpr std::size_t kLowLatencyMax = std::size_t{64} << 10;
constexpr std::size_t kRingMin = std::size_t{1} << 20;  // auto, across nodes (all_reduce)
// Flag phases: 0 and 1 for every launch's exchanges (see publish_and_wait);
// all_to_allv's per-round data flags, acks and byte counts; the ring's
// per-step flags.
constexpr int kPhaseVData = 2, kPhaseVAck = 3, kPhaseVLen = 4, kPhaseRing = 5, kPhases = 6;

// What a collective was called with. Its bits() ride above the epoch in the
// flags every member sets for the others anyway (the call word: bits <<
// kEpochBits | epoch), so members that disagree fail, naming the
// difference, without an extra round trip (host_coll.cpp; kernels.cuh,
// where the ll protocol's lines carry them too).
struct CallSig {
  const char* fn = "";
  int kind = 0;  // which collective (call_sig.cpp: kinds)
  DType dtype = DType::kF32;
  RedOp op = RedOp::kSum;
  int root = -1;
  std::size_t count = 0;
  int algo = 0;  // CallAlgo: on GPUs, members that chose other kernels differ too
  // 24 bits: kind (4), dtype (3), op (2), algo (2), a hash of count and root (13).
  std::uint32_t bits() const;
};
// Every collective walks its data in chunks, and a count of 0 still makes
// one (empty) chunk: the members exchange call words even with nothing to
// send, so one that asked for nothing against one that asked for something
// stops naming both instead of leaving the other waiting ("once for 0").
enum CallAlgo : int { kAlgoPush = 0, kAlgoTwoShot = 1, kAlgoRing = 2, kAlgoLowLatency = 3 };
constexpr int kEpochBits = 40;
constexpr std::uint64_t kEpochMask = (std::uint64_t{1} << kEpochBits) - 1;
constexpr std::uint32_t kCallBitsMask = (1u << (64 - kEpochBits)) - 1;
// "PE <peer> called <theirs> while PE <me> called <mine> ...": the error of
// members that disagree (world PEs; root -1: none).
std::string call_mismatch_text(const char* fn, int peer, std::uint32_t theirs, int me, std::uint32_t mine,
                               std::size_t count, int root, int team);

// Host-memory PEs: no GPU, collectives run on the host API (host_coll.cpp).
inline bool host_heaps() { return nvst::device() < 0; }

// A collective's team as this PE sees it.
struct TeamView {
  int handle;
  int me, npes;             // this PE's index, the team's size
  int start, stride;        // member p is world PE start + p * stride
  bool cross_node = false;  // GPUs: some member is on another node
  int world_pe(int p) const { return start + p * stride; }
};

// Bytes of each member's slot in a workspace buffer of `chunk` bytes
// (16-byte multiple).
inline std::size_t slot_for(std::size_t chunk, int npes) { return chunk / static_cast<std::size_t>(npes) / 16 * 16; }

template <typename W>
bool prepared(const std::vector<W>& all, int handle) {
  return handle < static_cast<int>(all.size()) && all[static_cast<std::size_t>(handle)].flags != nullptr &&
         all[static_cast<std::size_t>(handle)].generation == nvst::detail::init_generation();
}

// The team's workspace. The world's is made on first use (every PE is in the
// world, so that first call is a collective allocation anyway); any other
// team's must have been made by prepare(team) on every PE.
template <typename W>
W& workspace_of(std::vector<W>& all, const char* fn, const TeamView& t) {
  if (!prepared(all, t.handle)) {
    NVST_REQUIRE(t.handle == static_cast<int>(Team::kWorld), "nvst::coll::", fn, ": team ", t.handle,
                 " has no workspace: call nvst::coll::prepare(team) on every PE (a collective allocation) after "
                 "creating the team");
    prepare(Team::kWorld);
  }
  return all[static_cast<std::size_t>(t.handle)];
}

// Arithmetic the kernels and the host-memory version share.
// Integers wrap (unsigned arithmetic: no signed overflow).
template <typename T>
__host__ __device__ __forceinline__ T wrap_mul(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
}
template <typename T>
__host__ __device__ __forceinline__ T wrap_add(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
}

// The ring's flag value for step k of launch e: above every earlier one
// (steps < 256), so one word per (left neighbour, block) serves every step.
__host__ __device__ __forceinline__ std::uint64_t ring_value(std::uint64_t e, int k) {
  return (e << 8) | static_cast<std::uint64_t>(k + 1);
}

}  // namespace nvst::coll::internal
