// Fabric transport: one libfabric RDM endpoint per PE, the symmetric heap
// registered for remote writes, and every peer's address, heap
// base and key exchanged through the bootstrap. It only issues operations and
// reports completions; ordering (a signal after its data), fence and quiet
// are the proxy's job (transport/proxy.hpp).
//
// Provider: NVST_FABRIC_PROVIDER ("tcp;ofi_rxm", "shm", "verbs;ofi_rxm",
// "efa", ...); by default the first present of efa, verbs;ofi_rxm,
// tcp;ofi_rxm. Asking for one that is missing fails with the list of those
// present. Every operation asks for FI_DELIVERY_COMPLETE: its completion
// means the bytes are visible in the target's memory, which is what lets a
// signal follow its data. Providers must carry 4 bytes of remote CQ data
// (write_with_data).
//
// Scope: memory keys are pseudo-random per job and PE (derived from the
// job's secret) where the provider lets us choose them, so a stranger who
// reaches the endpoint cannot write our memory; socket-based providers
// listen on NVST_FABRIC_IFACE's address, or on loopback when every PE runs
// on one host.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nvst/fabric_info.hpp"
#include "transport/call_watch.hpp"

namespace nvst {

class Bootstrap;

namespace fabric {

// Removes this user's shm regions whose process has ended (killed PEs of
// this or an earlier job); returns how many. Opening an shm transport and a
// PE that learns of a peer's death call it.
int remove_stale_shm_regions();

// What every context passed to write()/write_with_data() must begin with: providers
// that ask for FI_CONTEXT or FI_CONTEXT2 mode use these bytes while the
// operation is in flight (struct fi_context2 is 8 pointers).
struct ProviderContext {
  void* internal[8];
};

// A completed (or failed) operation: the context passed when it was posted.
// Or, with `remote` set, a peer's write_with_data() that has landed in this
// PE's memory: `data` is what it carried (context is null).
struct Completion {
  void* context;
  int error;  // 0, or a positive libfabric error code
  std::string error_text;
  bool remote = false;
  std::uint32_t data = 0;
};

// Completion queue room: our own operations in flight (a caller keeps at
// most kMaxLocalInFlight) and peers' write_with_data() reports (at most
// kMaxRemoteDataPerPeer in flight from each peer), so that the queue never
// has to spill (the software providers keep an overflow list, slower;
// others may refuse).
constexpr std::size_t kMaxLocalInFlight = 512;
constexpr std::size_t kMaxRemoteDataPerPeer = 16;

// The remotely writable regions of every PE: its symmetric heap (when it is
// host memory, or GPU memory with FI_HMEM) and its control region (host
// memory: the staged-put inboxes and their acks).
enum class Region { kHeap, kControl };

class Transport {
 public:
  // Collective over the world: opens the endpoint, registers the heap (for
  // remote writes; heap == nullptr: not registered, GPU heaps without
  // FI_HMEM), the control region (remote writes) and the scratch region
  // (local sources: staging slots and the acks' words), exchanges addresses.
  // `near_device` >= 0: of several domains (NICs) of the provider, take the
  // one nearest that GPU (topology.hpp).
  Transport(Bootstrap& boot, char* heap, std::size_t heap_bytes, char* control, std::size_t control_bytes,
            char* scratch, std::size_t scratch_bytes, int near_device = -1);
  ~Transport();
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  const std::string& provider() const { return provider_; }
  const std::string& domain() const { return domain_; }
  bool has_hmem() const { return hmem_; }

  // `context` points at a ProviderContext (first member of the caller's
  // record), untouched by the caller until the completion comes back.
  // Posts a write of [src, src+bytes) to `pe`'s region at `dest_offset`.
  // src lies in a registered region. Returns false when the provider is out
  // of resources (FI_EAGAIN): progress() and post again.
  bool write(int pe, const void* src, std::size_t bytes, Region region, std::uint64_t dest_offset, void* context);
  // The same, and once the bytes are in the target's memory its progress()
  // reports a remote Completion carrying `data` (libfabric's remote CQ data:
  // fi_writedata). 32 bits, what every provider we take carries (verbs and
  // efa: 4 bytes of immediate data). Its own completion only says that
  // `src` may be reused (FI_TRANSMIT_COMPLETE): the target's report is what
  // says the bytes are there.
  bool write_with_data(int pe, const void* src, std::size_t bytes, Region region, std::uint64_t dest_offset,
                       std::uint32_t data, void* context);
  // A write of at most inject_limit() bytes whose source is copied at the
  // call, with no completion (fi_inject_write): for a word nobody waits on
  // the delivery of (an inbox ack). False on FI_EAGAIN, as write().
  bool write_inject(int pe, const void* src, std::size_t bytes, Region region, std::uint64_t dest_offset);
  std::size_t inject_limit() const { return inject_limit_; }
  // Whether a write may come from any host memory of this process (the
  // provider needs no local registration: no FI_MR_LOCAL), not only from the
  // heap and the scratch region. Then a host heap's put goes straight from
  // the caller's buffer, with no copy into a staging slot.
  bool any_source() const { return any_source_; }
  // Drives the provider (incoming data for this PE included) and appends
  // finished operations to `out`. Returns how many were appended.
  int progress(std::vector<Completion>& out);

  // A file descriptor that turns readable when progress() has work (a
  // completion, a peer's data), or -1 where the provider offers none (then
  // only polling progress() moves it).
  int wait_fd() const { return wait_fd_; }
  // Whether the caller may block on wait_fd() now (fi_trywait): false when
  // events are already pending (call progress() first) or there is no fd.
  bool may_block();
  // PE `pe`'s endpoint address as the provider names it (fi_getname).
  std::vector<std::uint8_t> address(int pe) const;
  // The key PE `pe` registered `region` under.
  std::uint64_t key(int pe, Region region) const;

  // Largest single write; larger puts are split by the caller.
  std::size_t max_write() const { return max_write_; }
  // Posts refused with FI_EAGAIN so far (NVST_PROXY_DEBUG shows it).
  std::uint64_t refused() const { return refused_; }

  // The provider call the calling thread is inside, for a watchdog on
  // another thread. One can block for good on a dead peer: libfabric 1.17's
  // shm spins on a lock inside the peer's shared memory, and a peer killed
  // while holding it never lets go (seen in CI:
  // KilledPeerGivesAClearErrorAndNoHang).
  CallWatch::Snapshot provider_call() const { return provider_call_.snapshot(); }
  // Time spent inside provider calls so far, once accounting is on
  // (NVST_PROXY_DEBUG turns it on and reports it).
  CallWatch& provider_calls() { return provider_call_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string provider_;
  std::string domain_;
  bool hmem_ = false;
  std::size_t max_write_ = 0;
  std::size_t inject_limit_ = 0;
  bool any_source_ = false;
  std::uint64_t refused_ = 0;
  int wait_fd_ = -1;
  CallWatch provider_call_;
};

}  // namespace fabric
}  // namespace nvst
