// A multi-producer single-consumer ring of fixed-size items in the
// consumer's symmetric memory. Every PE owns one ring (the symmetric layout is
// the same everywhere); any PE, from the host or a kernel, pushes into the
// ring of any PE, and the owner pops from its own. One algorithm for both
// sides: `Ops` as in hash_map.hpp (ops_common.hpp lists them).
//
// Layout at the consumer:
//   tail             tickets handed out (producers fetch_add it remotely)
//   head             items popped (written by the consumer only)
//   ready[capacity]  ticket + 1 once the item of that ticket is in its slot
//   data[capacity][item_bytes]
// Protocol: a producer takes ticket t = fetch_add(tail, 1); waits until
// t - head < capacity (flow control: its slot t % capacity was popped);
// writes the item and then ready[t % capacity] = t + 1 with put_signal (data
// before signal). The consumer waits for ready[head % capacity] >= head + 1,
// copies the item out, then releases head + 1.
// Invariants: head <= tail; a slot is written only for ticket t with
// head > t - capacity, i.e. after the consumer copied the slot's previous item
// (ticket t - capacity) and released head: nothing unread is overwritten.
// Items leave in ticket order; every ticket is popped once (no loss, no
// duplicate). A producer that dies between its ticket and its signal
// stalls the ring: the consumer's wait times out with a message.
// Hand-overs: a producer waits for the consumer only when the ring is full,
// the consumer for a producer only when the next ticket is unwritten; the
// tail, head and slots are plain memory, so neither needs the other's kernel
// to be running otherwise. PEs time-sharing one GPU thus move about
// `capacity` items per turn of the time slices, not one: size the ring for
// the items a turn should carry.
#pragma once

#include <cstddef>
#include <cstdint>

#include "nvst/structures/ops_common.hpp"

namespace nvst::structures {

struct RingView {
  std::uint64_t* tail;  // symmetric words
  std::uint64_t* head;
  std::uint64_t* ready;  // capacity words
  char* data;            // capacity * item_bytes
  std::uint64_t capacity;
  std::uint64_t item_bytes;
};

// Pushes `item_bytes` bytes of `src` into `consumer`'s ring; returns the
// ticket. Waits while the ring is full (the device or host timeout ends a
// wait on a consumer that does not pop).
NVST_HD_TEMPLATE template <typename Ops>
NVST_HD std::uint64_t ring_push(const RingView& r, int consumer, const void* src) {
  const std::uint64_t t = Ops::fetch_add(r.tail, std::uint64_t{1}, consumer);
  // The wait is an acquire: the slot is written after the consumer's copy
  // of its previous item.
  if (t >= r.capacity)
    Ops::wait_ge(r.head, t - r.capacity + 1, consumer, "room in a ring buffer (its consumer does not pop)");
  const std::uint64_t k = t % r.capacity;
  Ops::put_signal(r.data + k * r.item_bytes, src, r.item_bytes, r.ready + k, t + 1, consumer);
  return t;
}

// Pops the next item of this PE's ring into `dst`; returns its ticket.
// The consumer is one thread (host or device) at a time.
NVST_HD_TEMPLATE template <typename Ops>
NVST_HD std::uint64_t ring_pop(const RingView& r, void* dst) {
  const std::uint64_t h = Ops::load_acquire(r.head);
  const std::uint64_t k = h % r.capacity;
  Ops::wait_local_ge(r.ready + k, h + 1,
                     "the next item of a ring buffer (a producer took its ticket and has "
                     "not written it)");
  Ops::copy_local(dst, r.data + k * r.item_bytes, r.item_bytes);
  Ops::store_release(r.head, h + 1);
  return h;
}

// Items waiting in this PE's ring (taken, written or not yet).
NVST_HD_TEMPLATE template <typename Ops>
NVST_HD std::uint64_t ring_size(const RingView& r) {
  return Ops::load_acquire(r.tail) - Ops::load_acquire(r.head);
}

}  // namespace nvst::structures
