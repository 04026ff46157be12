// The symmetric heap's allocator: offsets, not memory. Every PE runs the same
// deterministic first-fit over the same sequence of collective calls, so the
// same call returns the same offset everywhere; that is what makes an
// address "symmetric". Free blocks coalesce with their neighbours.
#pragma once

#include <cstddef>
#include <map>
#include <optional>

namespace nvst {

class HeapAllocator {
 public:
  // Manages offsets [begin, end).
  HeapAllocator(std::size_t begin, std::size_t end);

  // Offset of a new block of `bytes` aligned to `alignment` (a power of two);
  // nullopt when no free block fits. bytes must be > 0.
  std::optional<std::size_t> allocate(std::size_t bytes, std::size_t alignment);
  // Frees the block starting at `offset`; false if no block starts there.
  bool release(std::size_t offset);

  std::size_t free_bytes() const;
  std::size_t largest_free_block() const;
  std::size_t capacity() const { return end_ - begin_; }
  std::size_t live_blocks() const { return used_.size(); }
  // Size of the live block starting at offset, or 0.
  std::size_t block_size(std::size_t offset) const;

 private:
  std::size_t begin_, end_;
  std::map<std::size_t, std::size_t> free_;  // offset -> size
  std::map<std::size_t, std::size_t> used_;  // offset -> size (incl. alignment pad)
  std::map<std::size_t, std::size_t> pad_;   // aligned offset -> pad before it
};

}  // namespace nvst
