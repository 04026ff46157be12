#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "nvst/error.hpp"
#include "runtime/heap_allocator.hpp"

using nvst::HeapAllocator;

TEST(HeapAllocator, HonoursEveryPowerOfTwoAlignment) {
  HeapAllocator a(64 * 1024, 64 * 1024 + (64u << 20));
  for (std::size_t align = 16; align <= 65536; align *= 2) {
    for (std::size_t bytes : {1ul, 17ul, 4096ul, 100000ul}) {
      auto off = a.allocate(bytes, align);
      ASSERT_TRUE(off.has_value());
      EXPECT_EQ(*off % align, 0u) << "bytes " << bytes << " align " << align;
      EXPECT_EQ(a.block_size(*off), bytes);
    }
  }
}

TEST(HeapAllocator, ExhaustionReturnsNothingAndFreeingRestoresCapacity) {
  HeapAllocator a(0, 1 << 20);
  std::vector<std::size_t> offs;
  while (auto off = a.allocate(1000, 256)) offs.push_back(*off);
  EXPECT_GT(offs.size(), 900u);
  EXPECT_FALSE(a.allocate(1 << 20, 16).has_value());
  // Free in a scrambled order: neighbours must coalesce back to one block.
  std::mt19937 rng(7);
  std::shuffle(offs.begin(), offs.end(), rng);
  for (auto off : offs) EXPECT_TRUE(a.release(off));
  EXPECT_EQ(a.free_bytes(), a.capacity());
  EXPECT_EQ(a.largest_free_block(), a.capacity());
  EXPECT_EQ(a.live_blocks(), 0u);
}

TEST(HeapAllocator, ReleaseOfUnknownOffsetIsRefused) {
  HeapAllocator a(0, 1 << 20);
  auto off = a.allocate(100, 256);
  ASSERT_TRUE(off);
  EXPECT_FALSE(a.release(*off + 16));
  EXPECT_TRUE(a.release(*off));
  EXPECT_FALSE(a.release(*off));  // double free
}

TEST(HeapAllocator, SameCallsGiveSameOffsets) {
  // What makes addresses symmetric: every PE runs the same sequence.
  HeapAllocator a(4096, 8 << 20), b(4096, 8 << 20);
  std::mt19937_64 rng(42);
  std::vector<std::size_t> live;
  for (int i = 0; i < 2000; ++i) {
    if (!live.empty() && rng() % 3 == 0) {
      std::size_t k = rng() % live.size();
      EXPECT_EQ(a.release(live[k]), b.release(live[k]));
      live.erase(live.begin() + static_cast<long>(k));
      continue;
    }
    std::size_t bytes = 1 + rng() % 20000, align = std::size_t{16} << (rng() % 8);
    auto x = a.allocate(bytes, align), y = b.allocate(bytes, align);
    ASSERT_EQ(x.has_value(), y.has_value());
    if (x) {
      EXPECT_EQ(*x, *y);
      live.push_back(*x);
    }
  }
}

TEST(HeapAllocator, BadArgumentsThrow) {
  HeapAllocator a(0, 1 << 20);
  EXPECT_THROW(a.allocate(10, 0), nvst::Error);
  EXPECT_THROW(a.allocate(10, 3), nvst::Error);
  EXPECT_THROW(a.allocate(0, 16), nvst::Error);
  EXPECT_THROW(HeapAllocator(10, 5), nvst::Error);
}
