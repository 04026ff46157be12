// A fixed-capacity hash map spread over all PEs: key -> owner PE by hash,
// open addressing (linear probing) in the owner's symmetric slots, lock-free
// with remote compare-and-swap. One algorithm for host threads and GPU
// threads: `Ops` is nvst::structures::HostOps (host_ops.hpp: the host API's
// atomics) or DeviceOps (device_ops.cuh: the device API's), so a kernel and a
// Python call on the same map follow the same protocol.
//
// Layout (the same on every PE, `capacity` slots of three 64-bit words):
//   key        0 = empty, ~0 = erased, else the user key + 1
//   value
//   published  0 until the first value of the slot's key is stored
// Invariants: a key word goes empty -> key -> erased and never back (until
// clear(), collective), so a key is in at most one slot of its owner, and a
// lookup may stop at the first empty slot. A key's value is read only after
// `published` is non-zero. Erased slots are not reused before clear(): a map
// that sees many erases needs the capacity of all keys ever inserted.
#pragma once

#include <cstdint>

#include "nvst/structures/ops_common.hpp"

namespace nvst::structures {

inline constexpr std::uint64_t kSlotEmpty = 0;
inline constexpr std::uint64_t kSlotErased = ~std::uint64_t{0};
// Keys the map can hold: 0 .. kMaxKey (two key words are reserved).
inline constexpr std::uint64_t kMaxKey = ~std::uint64_t{0} - 2;

enum class InsertResult : int { kInserted = 0, kUpdated = 1, kFull = 2 };

struct HashMapView {
  std::uint64_t* slots;    // symmetric: 3 * capacity words
  std::uint64_t capacity;  // slots per PE
  int n_pes;
};

NVST_HD inline std::uint64_t mix64(std::uint64_t x) {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
NVST_HD inline int hash_owner(std::uint64_t key, int n_pes) {
  return static_cast<int>(mix64(key) % static_cast<std::uint64_t>(n_pes));
}
NVST_HD inline std::uint64_t hash_start(std::uint64_t key, std::uint64_t capacity) {
  return mix64(key ^ 0x5bd1e9955bd1e995ull) % capacity;
}

// Inserts or updates `key`. kFull when every slot of the owner is taken
// by other keys (or erased).
NVST_HD_TEMPLATE template <typename Ops>
NVST_HD InsertResult hash_map_insert(const HashMapView& m, std::uint64_t key, std::uint64_t value) {
  const int owner = hash_owner(key, m.n_pes);
  const std::uint64_t stored = key + 1;
  std::uint64_t i = hash_start(key, m.capacity);
  for (std::uint64_t probes = 0; probes < m.capacity; ++probes, i = i + 1 == m.capacity ? 0 : i + 1) {
    std::uint64_t* slot = m.slots + 3 * i;
    std::uint64_t seen = Ops::fetch(slot, owner);
    if (seen == kSlotEmpty) seen = Ops::compare_swap(slot, kSlotEmpty, stored, owner);
    if (seen != kSlotEmpty && seen != stored) continue;  // another key's, or erased
    // Ours: claimed now (seen was empty) or earlier (by us or a racing insert).
    Ops::swap(slot + 1, value, owner);
    Ops::fence();  // the value before `published`
    Ops::fetch_add(slot + 2, std::uint64_t{1}, owner);
    return seen == kSlotEmpty ? InsertResult::kInserted : InsertResult::kUpdated;
  }
  return InsertResult::kFull;
}

// The slot holding `key` at its owner (the owner in *owner), or nullptr.
NVST_HD_TEMPLATE template <typename Ops>
NVST_HD std::uint64_t* hash_map_find(const HashMapView& m, std::uint64_t key, int* owner) {
  *owner = hash_owner(key, m.n_pes);
  const std::uint64_t stored = key + 1;
  std::uint64_t i = hash_start(key, m.capacity);
  for (std::uint64_t probes = 0; probes < m.capacity; ++probes, i = i + 1 == m.capacity ? 0 : i + 1) {
    std::uint64_t* slot = m.slots + 3 * i;
    const std::uint64_t seen = Ops::fetch(slot, *owner);
    if (seen == kSlotEmpty) return nullptr;
    if (seen == stored) return slot;
  }
  return nullptr;
}

// The value of `key` into *value; false when the map does not hold it.
NVST_HD_TEMPLATE template <typename Ops>
NVST_HD bool hash_map_lookup(const HashMapView& m, std::uint64_t key, std::uint64_t* value) {
  int owner;
  std::uint64_t* slot = hash_map_find<Ops>(m, key, &owner);
  if (slot == nullptr) return false;
  // Claimed by an insert that may not have stored its value yet.
  Ops::wait_ge(slot + 2, std::uint64_t{1}, owner,
               "a hash map slot's value (an insert claimed the key and has not published it)");
  *value = Ops::fetch(slot + 1, owner);
  return true;
}

// Removes `key`; false when the map did not hold it.
NVST_HD_TEMPLATE template <typename Ops>
NVST_HD bool hash_map_erase(const HashMapView& m, std::uint64_t key) {
  int owner;
  std::uint64_t* slot = hash_map_find<Ops>(m, key, &owner);
  return slot != nullptr && Ops::compare_swap(slot, key + 1, kSlotErased, owner) == key + 1;
}

}  // namespace nvst::structures
