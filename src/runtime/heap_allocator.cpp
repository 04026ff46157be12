#include "runtime/heap_allocator.hpp"

#include <algorithm>

#include "nvst/error.hpp"

namespace nvst {

HeapAllocator::HeapAllocator(std::size_t begin, std::size_t end) : begin_(begin), end_(end) {
  NVST_REQUIRE(begin <= end, "HeapAllocator: begin ", begin, " > end ", end);
  if (end > begin) free_[begin] = end - begin;
}

std::optional<std::size_t> HeapAllocator::allocate(std::size_t bytes, std::size_t alignment) {
  NVST_REQUIRE(bytes > 0, "HeapAllocator::allocate: 0 bytes");
  NVST_REQUIRE(alignment > 0 && (alignment & (alignment - 1)) == 0, "alignment must be a power of two, got ",
               alignment);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    const std::size_t start = it->first, size = it->second;
    const std::size_t aligned = (start + alignment - 1) / alignment * alignment;
    const std::size_t pad = aligned - start;
    if (pad > size || size - pad < bytes) continue;
    // Take [start, aligned + bytes); the rest stays free.
    free_.erase(it);
    const std::size_t taken = pad + bytes;
    if (size > taken) free_[start + taken] = size - taken;
    used_[aligned] = bytes;
    pad_[aligned] = pad;
    return aligned;
  }
  return std::nullopt;
}

bool HeapAllocator::release(std::size_t offset) {
  auto it = used_.find(offset);
  if (it == used_.end()) return false;
  const std::size_t pad = pad_[offset];
  std::size_t start = offset - pad;
  std::size_t size = pad + it->second;
  used_.erase(it);
  pad_.erase(offset);
  // Coalesce with the free block after and the one before.
  auto next = free_.find(start + size);
  if (next != free_.end()) {
    size += next->second;
    free_.erase(next);
  }
  auto prev = free_.lower_bound(start);
  if (prev != free_.begin()) {
    --prev;
    if (prev->first + prev->second == start) {
      start = prev->first;
      size += prev->second;
      free_.erase(prev);
    }
  }
  free_[start] = size;
  return true;
}

std::size_t HeapAllocator::free_bytes() const {
  std::size_t n = 0;
  for (auto& [off, size] : free_) n += size;
  return n;
}

std::size_t HeapAllocator::largest_free_block() const {
  std::size_t n = 0;
  for (auto& [off, size] : free_) n = std::max(n, size);
  return n;
}

std::size_t HeapAllocator::block_size(std::size_t offset) const {
  auto it = used_.find(offset);
  return it == used_.end() ? 0 : it->second;
}

}  // namespace nvst
