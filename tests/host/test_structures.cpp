// The distributed hash map and ring buffer (include/nvst/structures) on
// host-memory PEs, several PEs at once against sequential models:
//  - hash map: two threads per PE, each with keys of its own that follow a
//    std::unordered_map exactly, op by op, while every thread of every PE
//    also inserts the same shared keys; afterwards every
//    key is in at most one slot of its owner and the shared ones hold a value
//    one of the PEs wrote; filling a small map reports kFull;
//  - ring buffer: two producer threads of every PE push into PE 0's ring
//    (small, so producers wait for room) and into the PE's right
//    neighbour's; each consumer gets every producer's items once, in that
//    producer's order.
// NVST_STRUCTURE_TEST_OPS scales the operations per thread (default CI-sized).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <unordered_map>
#include <vector>

#include "nvst/nvst.hpp"
#include "nvst/structures/hash_map.hpp"
#include "nvst/structures/host_ops.hpp"
#include "nvst/structures/ring_buffer.hpp"
#include "pe_harness.hpp"

using namespace nvst::test;
using nvst::structures::HostOps;

namespace {

int ops_per_pe(int ci_default) {
  const char* v = std::getenv("NVST_STRUCTURE_TEST_OPS");
  return v ? std::max(1, std::atoi(v)) : ci_default;
}

constexpr std::uint64_t kShared = 64;
// Threads per PE that hammer the map at once, each with keys of its own.
constexpr int kMapThreads = 2;

// One thread's random operations on its own keys (checked against its
// model op by op) and on the shared keys; then its keys hold the model's
// values. 0, or 1 after printing what differed.
int hash_map_thread(const nvst::structures::HashMapView& m, int me, int k, int ops) {
  std::mt19937_64 rng(99 + static_cast<std::uint64_t>(me * kMapThreads + k));
  std::unordered_map<std::uint64_t, std::uint64_t> model;
  for (int i = 0; i < ops; ++i) {
    const std::uint64_t r = rng();
    const std::uint64_t key =
        (static_cast<std::uint64_t>(me + 1) << 48) | (static_cast<std::uint64_t>(k) << 40) | (r % (ops / 2 + 1));
    const std::uint64_t value = rng();
    switch (r >> 60) {
      case 0:
      case 1:
      case 2:
      case 3:
      case 4:
      case 5: {  // insert
        const auto got = nvst::structures::hash_map_insert<HostOps>(m, key, value);
        const auto want =
            model.count(key) ? nvst::structures::InsertResult::kUpdated : nvst::structures::InsertResult::kInserted;
        PE_EXPECT(got == want, "insert of key ", key, " at op ", i, ": result ", static_cast<int>(got), ", model ",
                  static_cast<int>(want));
        model[key] = value;
        break;
      }
      case 6:
      case 7:
      case 8:
      case 9:
      case 10: {  // lookup
        std::uint64_t v = 0;
        const bool found = nvst::structures::hash_map_lookup<HostOps>(m, key, &v);
        const auto it = model.find(key);
        PE_EXPECT(found == (it != model.end()) && (!found || v == it->second), "lookup of key ", key, " at op ", i,
                  ": found ", found, " value ", v, "; model ", it != model.end(), " ",
                  it != model.end() ? it->second : 0);
        break;
      }
      case 11:
      case 12: {  // erase
        const bool erased = nvst::structures::hash_map_erase<HostOps>(m, key);
        PE_EXPECT(erased == (model.erase(key) == 1), "erase of key ", key, " at op ", i, ": ", erased);
        break;
      }
      default: {  // a shared key, contended by every thread of every PE
        const auto got =
            nvst::structures::hash_map_insert<HostOps>(m, r % kShared, (static_cast<std::uint64_t>(me) << 32) | 7);
        PE_EXPECT(got != nvst::structures::InsertResult::kFull, "shared insert: full");
      }
    }
  }
  // Every key of the model is there with its value (other threads and PEs
  // touch only their own keys and the shared ones).
  for (const auto& [key, v] : model) {
    std::uint64_t got = 0;
    PE_EXPECT(nvst::structures::hash_map_lookup<HostOps>(m, key, &got) && got == v, "key ", key,
              " after the run: ", got, " instead of ", v);
  }
  return 0;
}

int hash_map_hammer(int me, int ops) {
  nvst::init();
  const int n = nvst::n_pes();
  const std::uint64_t capacity = 4 * kMapThreads * static_cast<std::uint64_t>(ops) + 256;
  auto* slots = static_cast<std::uint64_t*>(nvst::calloc(3 * capacity, 8));
  const nvst::structures::HashMapView m{slots, capacity, n};
  nvst::barrier_all();
  std::vector<int> failed(kMapThreads, 0);
  std::vector<std::thread> threads;
  for (int k = 0; k < kMapThreads; ++k)
    threads.emplace_back([&, k] {
      try {
        failed[static_cast<std::size_t>(k)] = hash_map_thread(m, me, k, ops);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "PE %d thread %d: %s\n", me, k, e.what());
        failed[static_cast<std::size_t>(k)] = 1;
      }
    });
  for (auto& t : threads) t.join();
  for (int k = 0; k < kMapThreads; ++k) PE_EXPECT(failed[static_cast<std::size_t>(k)] == 0, "thread ", k, " failed");
  nvst::barrier_all();
  // Shared keys hold a value some PE wrote.
  for (std::uint64_t k = 0; k < kShared; ++k) {
    std::uint64_t got = 0;
    if (nvst::structures::hash_map_lookup<HostOps>(m, k, &got))
      PE_EXPECT((got & 0xFFFFFFFF) == 7 && (got >> 32) < static_cast<std::uint64_t>(n), "shared key ", k, " holds ",
                got, ", which no PE wrote");
  }
  // No key twice in this PE's slots (the owner's table is local).
  std::unordered_map<std::uint64_t, int> seen;
  for (std::uint64_t i = 0; i < capacity; ++i) {
    const std::uint64_t k = slots[3 * i];
    if (k != nvst::structures::kSlotEmpty && k != nvst::structures::kSlotErased)
      PE_EXPECT(++seen[k] == 1, "key ", k - 1, " is in two slots of PE ", me);
  }
  nvst::barrier_all();
  nvst::free(slots);
  nvst::finalize();
  return 0;
}

struct Item {
  std::uint64_t producer, seq, check;
};
std::uint64_t check_of(std::uint64_t p, std::uint64_t s) { return (p * 0x9e3779b97f4a7c15ull) ^ (s * 31 + 5); }

// Producer threads per PE: like the GPU test's producer threads, several of
// one PE push into the same rings at once (the host FIFO to the proxy takes
// any number of producers).
constexpr int kProducerThreads = 2;

int ring_hammer(int me, int items) {
  nvst::init();
  const int n = nvst::n_pes();
  const int producers = n * kProducerThreads;  // producer p = PE p / kProducerThreads
  constexpr std::uint64_t kCapacity = 8;       // small: producers wait for room
  auto* words = static_cast<std::uint64_t*>(nvst::calloc(2 + kCapacity, 8));
  auto* data = static_cast<char*>(nvst::calloc(kCapacity, sizeof(Item)));
  const nvst::structures::RingView r{words, words + 1, words + 2, data, kCapacity, sizeof(Item)};
  nvst::barrier_all();
  // Every producer sends `items` to PE 0 (seq 0..) and `items` to its PE's
  // right neighbour (seq items..): this PE's consumer counts what it expects.
  std::vector<std::uint64_t> expect(static_cast<std::size_t>(producers), 0);
  for (int p = 0; p < producers; ++p) {
    const int pe = p / kProducerThreads;
    if (me == 0) expect[static_cast<std::size_t>(p)] += static_cast<std::uint64_t>(items);
    if ((pe + 1) % n == me) expect[static_cast<std::size_t>(p)] += static_cast<std::uint64_t>(items);
  }
  std::uint64_t total = 0;
  for (auto e : expect) total += e;
  std::string consumer_error;
  std::thread consumer([&] {
    std::vector<std::uint64_t> next(static_cast<std::size_t>(producers), 0),
        next2(static_cast<std::size_t>(producers), 0), got(static_cast<std::size_t>(producers), 0);
    try {
      for (std::uint64_t i = 0; i < total; ++i) {
        Item it{};
        nvst::structures::ring_pop<HostOps>(r, &it);
        if (it.producer >= static_cast<std::uint64_t>(producers) || it.check != check_of(it.producer, it.seq)) {
          consumer_error = nvst::detail::concat("item ", i, " is garbled (producer ", it.producer, ")");
          return;
        }
        ++got[it.producer];
        // Each producer's two streams arrive each in its producer's order.
        const bool second = it.seq >= static_cast<std::uint64_t>(items);
        std::uint64_t& want = second ? next2[it.producer] : next[it.producer];
        if (it.seq != want + (second ? static_cast<std::uint64_t>(items) : 0)) {
          consumer_error =
              nvst::detail::concat("item ", i, " from producer ", it.producer, " has seq ", it.seq, ", expected ",
                                   want + (second ? items : 0), " (lost, repeated or out of order)");
          return;
        }
        ++want;
      }
      for (int p = 0; p < producers; ++p)
        if (got[static_cast<std::size_t>(p)] != expect[static_cast<std::size_t>(p)])
          consumer_error = nvst::detail::concat("from producer ", p, ": ", got[static_cast<std::size_t>(p)], " items, ",
                                                expect[static_cast<std::size_t>(p)], " sent");
    } catch (const std::exception& e) {
      consumer_error = e.what();
    }
  });
  std::vector<std::string> producer_error(kProducerThreads);
  std::vector<std::thread> producer_threads;
  for (int k = 0; k < kProducerThreads; ++k)
    producer_threads.emplace_back([&, k] {
      const std::uint64_t producer = static_cast<std::uint64_t>(me * kProducerThreads + k);
      try {
        for (int i = 0; i < items; ++i) {
          for (int stream = 0; stream < 2; ++stream) {  // to PE 0, then to the right neighbour (maybe PE 0 too)
            const std::uint64_t seq =
                static_cast<std::uint64_t>(i) + (stream == 0 ? 0 : static_cast<std::uint64_t>(items));
            Item it{producer, seq, check_of(producer, seq)};
            nvst::structures::ring_push<HostOps>(r, stream == 0 ? 0 : (me + 1) % n, &it);
          }
        }
      } catch (const std::exception& e) {
        producer_error[static_cast<std::size_t>(k)] = e.what();
      }
    });
  for (auto& t : producer_threads) t.join();
  consumer.join();
  for (const auto& e : producer_error) PE_EXPECT(e.empty(), "push: ", e);
  PE_EXPECT(consumer_error.empty(), consumer_error);
  PE_EXPECT(nvst::structures::ring_size<HostOps>(r) == 0, "items left in the ring");
  nvst::barrier_all();
  nvst::free(data);
  nvst::free(words);
  nvst::finalize();
  return 0;
}

}  // namespace

TEST(Structures, HashMapThreePesMatchSequentialModel) {
  const int ops = ops_per_pe(120);
  auto res = run_pes(3, [ops](int me) { return hash_map_hammer(me, ops); }, {}, 150);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(res[r].code(), 0) << "rank " << r;
}

TEST(Structures, HashMapReportsFull) {
  auto res = run_pes(2, [](int) {
    nvst::init();
    constexpr std::uint64_t kCapacity = 4;
    auto* slots = static_cast<std::uint64_t*>(nvst::calloc(3 * kCapacity, 8));
    const nvst::structures::HashMapView m{slots, kCapacity, 1};  // every key on PE 0 (a one-PE view)
    nvst::barrier_all();
    if (nvst::my_pe() == 0) {
      for (std::uint64_t k = 0; k < kCapacity; ++k)
        PE_EXPECT(nvst::structures::hash_map_insert<HostOps>(m, k, k) == nvst::structures::InsertResult::kInserted,
                  "insert ", k);
      PE_EXPECT(nvst::structures::hash_map_insert<HostOps>(m, 99, 1) == nvst::structures::InsertResult::kFull,
                "a fifth key in 4 slots is not reported full");
      PE_EXPECT(nvst::structures::hash_map_insert<HostOps>(m, 2, 5) == nvst::structures::InsertResult::kUpdated,
                "updating a present key in a full map");
    }
    nvst::barrier_all();
    nvst::free(slots);
    nvst::finalize();
    return 0;
  });
  for (int r = 0; r < 2; ++r) EXPECT_EQ(res[r].code(), 0) << "rank " << r;
}

TEST(Structures, RingBufferThreePesNothingLostOrDuplicated) {
  const int items = ops_per_pe(60);
  auto res = run_pes(3, [items](int me) { return ring_hammer(me, items); }, {}, 150);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(res[r].code(), 0) << "rank " << r;
}
