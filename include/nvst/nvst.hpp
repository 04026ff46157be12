// nvst host API: the runtime a process (a PE) uses to join a job, allocate
// symmetric memory and move data from the host. OpenSHMEM/NVSHMEM meaning
// throughout: nvst::malloc is nvshmem_malloc, nvst::ptr is nvshmem_ptr, and
// so on; the device half of the API is in <nvst/device.cuh>.
//
// Every function validates its arguments and throws nvst::Error with a
// message that names what was wrong. Collective functions (init, malloc,
// calloc, free, barrier_all, finalize) must be called by every PE in the same
// order; a PE that dies meanwhile is reported by the others, and every wait
// ends after NVST_TIMEOUT_S seconds (default 120) with a message.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include "nvst/error.hpp"
#include "nvst/proxy_fifo.hpp"

namespace nvst {

// Where the symmetric heap lives and how node peers reach it.
enum class HeapKind {
  kAuto,     // kCuMem where a GPU is present, else kHost
  kCuMem,    // cuMemCreate + POSIX fd over a Unix socket + cuMemMap (NVLink)
  kCudaIpc,  // legacy cudaIpcGetMemHandle / cudaIpcOpenMemHandle fallback
  kHost,     // host memory; no peer is reachable by load/store (CI, laptops)
  kNvshmem,  // NVIDIA's NVSHMEM underneath (NVST_BACKEND=nvshmem): the heap is one
             // nvshmem_malloc region and the device API's remote operations
             // call nvshmem_*; programs linked to nvst::nvst_nvshmem only
};

struct InitOptions {
  // Bytes of symmetric heap per PE; 0 = NVST_SYMMETRIC_SIZE or 1 GiB
  // (256 MiB for host heaps). Rounded up to the allocation granularity.
  std::size_t heap_bytes = 0;
  // kAuto = backend nvshmem -> kNvshmem, else NVST_HEAP
  // (auto|cumem|cudaipc|host|nvshmem).
  HeapKind heap_kind = HeapKind::kAuto;
  // "nvst" or "nvshmem"; "" = NVST_BACKEND (default nvst).
  std::string backend;
};

// A new unique ID (text) for a job whose PEs all run on this host: rank 0
// listens on loopback. Pass it to every PE as NVST_UNIQUE_ID (with NVST_RANK
// and NVST_WORLD_SIZE); the Python package's init_with_unique_id does that.
std::string new_loopback_unique_id();
// The same for a job across hosts: rank 0 runs on this host and listens on
// every interface; `host` is this host's address as the other PEs reach it.
std::string new_unique_id(const std::string& host);

// Joins the job described by the environment: NVST_* (set by `nvst` and the
// test harness when they spawn PEs), torchrun (RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT) or mpirun
// (OMPI_COMM_WORLD_*, plus MASTER_ADDR or NVST_BOOTSTRAP_ADDR). Picks the GPU
// LOCAL_RANK, bootstraps, builds the heap and maps node peers' heaps.
void init(const InitOptions& options = {});
// Collective: a barrier, then unmaps and frees everything.
void finalize();
bool initialized();

int my_pe();
int n_pes();
// -1 when this PE has no GPU (host heap).
int device();
HeapKind heap_kind();
// True in programs linked to nvst::nvst_nvshmem (HeapKind::kNvshmem works).
bool nvshmem_backend_built();
// NVSHMEM's version there ("3.4.5"), "" elsewhere.
std::string nvshmem_backend_version();
const char* heap_kind_name(HeapKind kind);

// A team is a set of PEs, as NVSHMEM's nvshmem_team_t: world (all), node
// (the PEs of this node, which reach each other's heaps by load/store;
// NVST_NODE_SIZE=k splits a host into logical nodes of k PEs), and strided
// subsets made by the two splits below. Teams live until finalize.
enum class Team : int { kInvalid = -1, kWorld = 0, kNode = 1 };
// This PE's index in the team; -1 if it is not a member.
int team_my_pe(Team team);
int team_n_pes(Team team);
// The world PE of the team's member `team_pe`; throws if out of range.
int team_translate_pe(Team team, int team_pe);
// Members start, start + stride, ..., (size of them) of `parent`, in the
// parent's numbering. Collective over the WORLD (unlike NVSHMEM, whose split
// is over the parent): every PE calls it, in the same order and with the
// same arguments (checked: a PE that differs, or a range that leaves the
// parent, fails on every PE), and every PE gets the handle, members or not
// (team_my_pe is -1 outside), so that per-team set-up such as
// nvst::coll::prepare(team) can allocate symmetric memory. With a node
// parent each node gets its own team under the one handle.
Team team_split_strided(Team parent, int start, int stride, int size);
// NVSHMEM's team_split_2d: the parent's members as rows of `xrange` PEs.
// Returns {x: the PEs of my row, y: the PEs of my column}. With the world as
// parent and xrange = the node size, x is my node and y holds one PE of each
// node (the same local index): the two levels of a hierarchical collective.
// Collective over the world, like team_split_strided.
std::pair<Team, Team> team_split_2d(Team parent, int xrange);

// Symmetric allocation. Collective: every PE passes the same size (checked:
// a mismatch throws on every PE, naming each PE's size) and receives the same
// offset in its own heap. Alignment is 256 bytes unless asked otherwise.
// malloc(0) returns nullptr. Exhaustion throws with the heap's figures.
void* malloc(std::size_t bytes);
// Also zeroed on every PE before any PE returns, so a put right after it
// cannot be erased by a slower PE's zeroing.
void* calloc(std::size_t count, std::size_t size);
void* align(std::size_t alignment, std::size_t bytes);
// Collective, and a barrier first (no PE frees what a peer may still write).
void free(void* ptr);

// Bytes of symmetric heap per PE, and those still free.
std::size_t heap_size();
std::size_t heap_free_bytes();
// Keeps this PE's heap memory mapped past finalize() for as long as the
// returned handle lives (host heaps; null for GPU heaps), so a view into it
// (a numpy array) reads stale bytes after finalize instead of freed memory.
std::shared_ptr<void> heap_lease();
// True when [addr, addr+bytes) lies inside this PE's symmetric heap.
bool is_symmetric(const void* addr, std::size_t bytes = 1);

// The address through which this PE loads and stores `pe`'s copy of the
// symmetric object `addr` (nvshmem_ptr). nullptr when `pe` is not reachable
// by load/store (another node, or a host heap). Throws when addr is not in
// the heap or pe is out of range.
void* ptr(const void* addr, int pe);

// Blocking barrier over all PEs: waits for this GPU's work, then for every
// PE to arrive. Memory written before it by any PE is visible after it.
void barrier_all();
// Stream-ordered barrier (a one-block kernel): later work on `stream` starts
// only after every PE's earlier work on its barrier stream is visible.
void barrier_all_on_stream(cudaStream_t stream);

// Stream-ordered copies through the copy engine to/from a node peer's heap.
// dest (put) or src (get) must be symmetric (on the NVSHMEM backend: in our
// heap, or anything nvshmem_malloc returned, nvshmem4py's tensors too); the
// other side may be any device or pinned memory. Complete when the stream
// reaches that point.
void putmem_on_stream(void* dest, const void* src, std::size_t bytes, int pe, cudaStream_t stream);
void getmem_on_stream(void* dest, const void* src, std::size_t bytes, int pe, cudaStream_t stream);
// Blocking forms: return when the copy is complete.
void putmem(void* dest, const void* src, std::size_t bytes, int pe);
void getmem(void* dest, const void* src, std::size_t bytes, int pe);

// ---- one-sided operations to any PE --------------------------------------
// Node peers (load/store reachable) are written directly; other PEs (other
// nodes, and every other PE when heaps are in host memory) go through this
// PE's proxy thread and the fabric transport (libfabric). Semantics are
// NVSHMEM's: _nbi forms return at once and their `src` may be reused only
// after quiet(); the signal of putmem_signal_nbi becomes visible at `pe` only
// after the data; fence() orders earlier puts before later ones; quiet()
// returns when every earlier put and signal of this PE is visible at its
// target. Host-side forms work on host heaps; on GPU heaps use the device API
// (<nvst/device.cuh>) or putmem_on_stream.
enum class SignalOp { kSet, kAdd };
enum class Cmp { kEq, kNe, kGt, kGe, kLt, kLe };

void putmem_nbi(void* dest, const void* src, std::size_t bytes, int pe);
// dest and sig_addr are symmetric; the signal word is 8-byte aligned.
void putmem_signal_nbi(void* dest, const void* src, std::size_t bytes, std::uint64_t* sig_addr, std::uint64_t signal,
                       SignalOp op, int pe);
void signal_op(std::uint64_t* sig_addr, std::uint64_t signal, SignalOp op, int pe);
// *dest on `pe` = value (nvshmem_TYPE_p): T of 1, 2, 4 or 8 bytes, dest
// symmetric and aligned to sizeof(T). Through the proxy the value rides in
// the command (a SET of its width), so nothing is staged; like a put it is
// visible at `pe` after quiet().
namespace detail {
void p_bytes(void* dest, const void* value, std::size_t width, int pe);
}
template <typename T>
void p(T* dest, T value, int pe) {
  static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8,
                "nvst::p: element must be 1, 2, 4 or 8 bytes");
  detail::p_bytes(dest, &value, sizeof(T), pe);
}
void fence();
void quiet();
// Waits (host heap) until `*sig_addr cmp value` holds on this PE; returns the
// value seen. Times out after NVST_TIMEOUT_S with a message.
std::uint64_t signal_wait_until(std::uint64_t* sig_addr, Cmp cmp, std::uint64_t value);
// Stream-ordered signalling (nvshmemx_*_on_stream), for host code that
// drives GPU work without writing a kernel (the Python package's send/recv).
// putmem_signal_on_stream: dest and sig_addr symmetric; the signal becomes
// visible at `pe` after the data. Node peers: a copy-engine copy, then a
// one-thread signal kernel; other nodes: a one-block kernel through the
// proxy. signal_wait_until_on_stream: later work on `stream` starts once
// this PE's word satisfies `cmp value` (a one-thread kernel; it ends the job
// with a message after NVST_DEVICE_TIMEOUT_S). GPU heaps only.
void putmem_signal_on_stream(void* dest, const void* src, std::size_t bytes, std::uint64_t* sig_addr,
                             std::uint64_t signal, SignalOp op, int pe, cudaStream_t stream);
void signal_op_on_stream(std::uint64_t* sig_addr, std::uint64_t signal, SignalOp op, int pe, cudaStream_t stream);
void signal_wait_until_on_stream(std::uint64_t* sig_addr, Cmp cmp, std::uint64_t value, cudaStream_t stream);

// ---- remote atomics (nvshmem_TYPE_atomic_*) --------------------------------
// On a 4- or 8-byte integer word of the symmetric heap (dest symmetric and
// aligned to its size) on PE `pe`; each returns the word's value before the
// operation. Host heaps: through the proxy (the target's proxy applies it,
// to this PE's own words too, so every atomic on a word is applied by the
// same kind of operation); GPU heaps: a one-thread kernel running the device
// API's atomic (<nvst/device/atomic.cuh>), waited for. Unordered with this
// PE's other operations to other words unless fence() stands between.
namespace detail {
std::uint64_t atomic_word(proxy::AtomicOp op, void* dest, std::size_t width, std::uint64_t operand,
                          std::uint64_t compare, int pe);
template <typename T>
std::uint64_t atomic_bits(T v) {
  static_assert(std::is_integral_v<T> && (sizeof(T) == 4 || sizeof(T) == 8),
                "nvst atomics: a 4- or 8-byte integer word");
  return static_cast<std::uint64_t>(static_cast<std::make_unsigned_t<T>>(v));
}
template <typename T>
T atomic_of(proxy::AtomicOp op, T* dest, T operand, T compare, int pe) {
  const std::uint64_t old = atomic_word(op, dest, sizeof(T), atomic_bits(operand), atomic_bits(compare), pe);
  return static_cast<T>(static_cast<std::make_unsigned_t<T>>(old));
}
}  // namespace detail
template <typename T>
T atomic_fetch_add(T* dest, T value, int pe) {
  return detail::atomic_of(proxy::AtomicOp::kFetchAdd, dest, value, T{}, pe);
}
// Stores `value` if the word equals `cond`; returns the value before either way.
template <typename T>
T atomic_compare_swap(T* dest, T cond, T value, int pe) {
  return detail::atomic_of(proxy::AtomicOp::kCompareSwap, dest, value, cond, pe);
}
template <typename T>
T atomic_swap(T* dest, T value, int pe) {
  return detail::atomic_of(proxy::AtomicOp::kSwap, dest, value, T{}, pe);
}
template <typename T>
T atomic_fetch(const T* dest, int pe) {
  return detail::atomic_of(proxy::AtomicOp::kFetch, const_cast<T*>(dest), T{}, T{}, pe);
}

// How this PE reaches `pe`: "self", "nvlink" (load/store), or
// "fabric:<provider>" (the proxy), or "none".
std::string transport_to(int pe);

// Which GPU `pe` runs on, as "<host>/<boot id>/<PCI bus id>" (from what every PE
// told the others at init), or "" when it has none. Two PEs on one GPU
// (logical nodes of a machine of one GPU) give the same string.
std::string gpu_of(int pe);

// Settings read from the environment, with defaults, for tools and docs.
double host_timeout_seconds();    // NVST_TIMEOUT_S, default 120
double device_timeout_seconds();  // NVST_DEVICE_TIMEOUT_S, default 60

// Bootstrap collectives over the control channel (TCP), for tools and
// libraries built on the runtime (NCCL/NVSHMEM ids, benchmark results).
// bootstrap_allgather: `mine` has the same size on every PE (checked).
std::vector<std::byte> bootstrap_allgather(const void* mine, std::size_t bytes);
// Root's `bytes` to every PE; every PE passes the same size.
void bootstrap_broadcast(void* data, std::size_t bytes, int root);
void bootstrap_barrier();

}  // namespace nvst
