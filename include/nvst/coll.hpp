// Collectives on the runtime: barrier, all_reduce, all_gather,
// reduce_scatter, broadcast, reduce, all_to_all and all_to_allv over any
// team (NVLink inside a node, the proxy to other nodes), stream-ordered, with no host
// synchronisation. Inputs and outputs are any device memory; data is
// staged through a symmetric workspace the library owns.
//
// Algorithms (NVST_COLL_ALGO=auto|ll|oneshot|twoshot|ring|hierarchical forces one):
//  - ll (all_reduce, reduce_scatter, all_gather, all_to_all on one node):
//    NCCL's LL protocol. Each PE stores its part for every peer straight
//    into that peer's workspace as 16-byte lines of 8 data bytes and two
//    copies of the launch's flag; a receiver polls each line until its flags
//    are this launch's, then reduces or places it. One NVLink trip and no
//    fence, at twice the bytes: for parts up to 64 KiB.
//  - oneshot: every PE publishes its input in its workspace, then each PE
//    reads every peer's copy over NVLink and reduces. One step; each PE
//    reads (n-1) x the data: best for small messages.
//  - twoshot: the same publication, then PE p reduces only slice p, publishes
//    it, and everyone gathers the n reduced slices. Each PE reads 2(n-1)/n of
//    the data: best for large messages.
//  - ring: 2(n-1) steps around the members; each step every PE sends one
//    segment (1/n of the data) to its right neighbour, partial sums first,
//    then finished segments. Each PE sends 2(n-1)/n of the data and only to
//    one neighbour, which works across nodes (the proxy carries it): the
//    bandwidth algorithm there. Segment s is reduced in ring order starting
//    at member s (src/coll/ring_layout.hpp), so results are bitwise equal on
//    every PE but, for floats, not those of the PE-order algorithms.
//  - hierarchical (the world only, asked for by name): all_reduce is a
//    reduce_scatter inside each node, an all_reduce of one part across the
//    nodes, an all_gather inside each node; all_gather (with
//    NVST_COLL_ALGO=hierarchical) gathers across the nodes first, each PE
//    sending its part once to its column (the PEs of its place in the other
//    nodes), then inside the node; reduce_scatter (likewise) reduces inside
//    the node first, then across. Only 1/k of the bytes cross nodes (k PEs
//    per node); reductions are each node's sum (in node order) reduced in
//    node order. The first call splits the world into node and column
//    teams (a collective allocation: not inside graph capture).
//  auto: on one node ll up to 64 KiB per part; above, all_reduce takes
//  oneshot on 2 PEs (both move the same remote bytes there, and
//  oneshot won at every size on 2x H200); on more PEs oneshot up to 256 KiB
//  per PE, twoshot above (threshold not yet calibrated on 4 GPUs); a team
//  across nodes of 3 or more members from 1 MiB: ring (it sends 2/n of
//  oneshot's bytes through the proxy; chosen by bytes, not yet timed).
// Except for ring, every PE reduces in PE order 0..n-1; all PEs get
// bitwise-equal results.
// Teams: every call takes a team (default: the world); PE numbers (roots,
// per-PE counts, the order of parts) are the team's. Each team has its own
// symmetric workspace (NVST_COLL_WORKSPACE bytes per buffer, 32M by
// default; 4 buffers on GPUs, 2 on host heaps) and its own epoch counter, so
// collectives on different teams are independent. The world's workspace is
// made on first use; any other team's by prepare(team), which every PE calls
// (members or not: it allocates symmetric memory), after creating the team
// and outside CUDA-graph capture. A team's collectives must be issued in the
// same order on its members and from one stream at a time.
// Host-memory PEs (no GPU) run the same algorithm on the host API through
// the proxy and the fabric (in/out are host memory, `stream` is ignored);
// that is what CI tests, and there a team may span logical nodes.
// GPU teams across nodes: the push kernels send a member of another node
// its part as a put_signal through the proxy, the ring its segment, and
// all_to_allv its rounds (docs/07); twoshot refuses such teams with a
// message. Not yet: hierarchical forms of broadcast, reduce and the
// all-to-alls, auto choosing a hierarchical form, or any timing across nodes.
// Reductions: sum, max, min, prod; integer sums and products wrap.
//  - reduce: the oneshot kernel, pushing to the root only; only the root
//    reduces.
//  - all_to_all: the push of reduce_scatter (part p to PE p's slot) with a
//    copy instead of the reduction; all_gather is the same kernel with every
//    PE sent the same bytes.
//  - all_to_allv: one launch; each pair of PEs streams its message through
//    the receiver's slot in rounds with a data flag and an ack per round, so
//    no PE needs the others' counts. The first round carries the sender's
//    byte count, and a receiver whose recv_counts disagrees stops with a
//    device error naming the peer (cost: one 8-byte store per pair).
#pragma once

#include <cstddef>
#include <span>

#include <cuda_runtime_api.h>

#include "nvst/nvst.hpp"

namespace nvst::coll {

enum class DType { kF32, kBF16, kF16, kI32, kI64 };
enum class RedOp { kSum, kMax, kMin, kProd };
enum class Algo { kAuto, kOneShot, kTwoShot, kHierarchical, kRing, kLowLatency };

std::size_t dtype_size(DType t);
const char* dtype_name(DType t);
const char* redop_name(RedOp op);
const char* algo_name(Algo a);

// Makes the team's workspace (a collective over the WORLD: every PE calls
// it, members or not; again is a no-op). The world's is made by its first
// collective, which is then a collective allocation: call prepare() first
// when that first call would be inside CUDA-graph capture. `in` and `out`
// of the calls below may be the same. Every call below is collective over
// its team's members.
void prepare(Team team = Team::kWorld);
// Stream-ordered barrier: no member's later work on `stream` starts before
// every member's earlier work on its stream is done (and, on host heaps,
// its puts delivered).
void barrier(cudaStream_t stream, Team team = Team::kWorld);
void all_reduce(const void* in, void* out, std::size_t count, DType dtype, RedOp op, cudaStream_t stream,
                Algo algo = Algo::kAuto, Team team = Team::kWorld);
// out holds n x count elements (n: the team's size): member p's input at p x count.
void all_gather(const void* in, void* out, std::size_t count, DType dtype, cudaStream_t stream,
                Team team = Team::kWorld);
// in holds n x count elements; member p's out (count elements) is the
// reduction of part p of every member's in (the oneshot push algorithm).
void reduce_scatter(const void* in, void* out, std::size_t count, DType dtype, RedOp op, cudaStream_t stream,
                    Team team = Team::kWorld);
// Every member's out = root's in (count elements); in is read on the root only.
void broadcast(const void* in, void* out, std::size_t count, DType dtype, int root, cudaStream_t stream,
               Team team = Team::kWorld);
// root's out (count elements) = the reduction of every member's in, in team
// order; out is written on the root only (may be null elsewhere).
void reduce(const void* in, void* out, std::size_t count, DType dtype, RedOp op, int root, cudaStream_t stream,
            Team team = Team::kWorld);
// in and out hold n x count elements: part p of in goes to member p, member
// p's part lands at out + p x count (MPI_Alltoall).
void all_to_all(const void* in, void* out, std::size_t count, DType dtype, cudaStream_t stream,
                Team team = Team::kWorld);
// MPI_Alltoallv: send_counts[p] elements from in + send_displs[p] go to
// member p, which receives them at out + recv_displs[me]; every span holds n
// entries (in elements), and recv_counts[p] must equal what p sends here
// (a mismatch stops the kernel with an error, it never corrupts silently).
// Bytes of out outside the received parts are left untouched.
void all_to_allv(const void* in, std::span<const std::size_t> send_counts, std::span<const std::size_t> send_displs,
                 void* out, std::span<const std::size_t> recv_counts, std::span<const std::size_t> recv_displs,
                 DType dtype, cudaStream_t stream, Team team = Team::kWorld);
// The same with arrays of n entries.
void all_to_allv(const void* in, const std::size_t* send_counts, const std::size_t* send_displs, void* out,
                 const std::size_t* recv_counts, const std::size_t* recv_displs, DType dtype, cudaStream_t stream,
                 Team team = Team::kWorld);

}  // namespace nvst::coll
