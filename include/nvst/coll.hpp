// Collectives on the runtime (issue 4): all_reduce, all_gather,
// reduce_scatter, broadcast, reduce, all_to_all and all_to_allv over the
// world team of one node (NVLink), stream-ordered, with
// no host synchronisation. Inputs and outputs are any device memory; data is
// staged through a symmetric workspace the library owns.
//
// Algorithms (NVST_COLL_ALGO=auto|oneshot|twoshot forces one):
//  - oneshot: every PE publishes its input in its workspace, then each PE
//    reads every peer's copy over NVLink and reduces. One step; each PE
//    reads (n-1) x the data: best for small messages.
//  - twoshot: the same publication, then PE p reduces only slice p, publishes
//    it, and everyone gathers the n reduced slices. Each PE reads 2(n-1)/n of
//    the data: best for large messages.
//  auto: oneshot on 2 PEs (both move the same remote bytes there, and
//  oneshot won at every size on 2x H200); on more PEs oneshot up to 256 KiB
//  per PE, twoshot above (threshold not yet calibrated on 4 GPUs).
// Every PE reduces in PE order 0..n-1, so all PEs get bitwise-equal results.
// Collectives must be issued in the same order on every PE and from one
// stream at a time (they share one workspace and one epoch counter).
// Host-memory PEs (no GPU) run the same algorithm on the host API through
// the proxy and the fabric (in/out are host memory, `stream` is ignored);
// that is what CI tests. Not yet: other teams, several GPU nodes.
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

namespace nvst::coll {

enum class DType { kF32, kBF16, kF16, kI32, kI64 };
enum class RedOp { kSum, kMax, kMin, kProd };
enum class Algo { kAuto, kOneShot, kTwoShot };

std::size_t dtype_size(DType t);
const char* dtype_name(DType t);
const char* redop_name(RedOp op);
const char* algo_name(Algo a);

// Collective over every PE (all on one node). Allocates the workspace on
// first use (that first call is a collective allocation: call it, or
// prepare(), outside CUDA-graph capture). `in` and `out` may be the same.
void prepare();
void all_reduce(const void* in, void* out, std::size_t count, DType dtype, RedOp op, cudaStream_t stream,
                Algo algo = Algo::kAuto);
// out holds n_pes x count elements: PE p's input at p x count.
void all_gather(const void* in, void* out, std::size_t count, DType dtype, cudaStream_t stream);
// in holds n_pes x count elements; PE p's out (count elements) is the
// reduction of part p of every PE's in (the oneshot push algorithm).
void reduce_scatter(const void* in, void* out, std::size_t count, DType dtype, RedOp op, cudaStream_t stream);
// Every PE's out = root's in (count elements); in is read on the root only.
void broadcast(const void* in, void* out, std::size_t count, DType dtype, int root, cudaStream_t stream);
// root's out (count elements) = the reduction of every PE's in, in PE order;
// out is written on the root only (may be null elsewhere).
void reduce(const void* in, void* out, std::size_t count, DType dtype, RedOp op, int root, cudaStream_t stream);
// in and out hold n_pes x count elements: part p of in goes to PE p, PE p's
// part lands at out + p x count (MPI_Alltoall).
void all_to_all(const void* in, void* out, std::size_t count, DType dtype, cudaStream_t stream);
// MPI_Alltoallv: send_counts[p] elements from in + send_displs[p] go to PE
// p, which receives them at out + recv_displs[me]; every span holds n_pes
// entries (in elements), and recv_counts[p] must equal what PE p sends here
// (a mismatch stops the kernel with an error, it never corrupts silently).
// Bytes of out outside the received parts are left untouched.
void all_to_allv(const void* in, std::span<const std::size_t> send_counts, std::span<const std::size_t> send_displs,
                 void* out, std::span<const std::size_t> recv_counts, std::span<const std::size_t> recv_displs,
                 DType dtype, cudaStream_t stream);
// The same with arrays of n_pes entries.
void all_to_allv(const void* in, const std::size_t* send_counts, const std::size_t* send_displs, void* out,
                 const std::size_t* recv_counts, const std::size_t* recv_displs, DType dtype, cudaStream_t stream);

}  // namespace nvst::coll
