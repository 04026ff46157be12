// Host-memory heap: for PEs without a GPU. No peer is reachable by
// load/store; the fabric transport (a later layer) moves data between them.
#include <cstdlib>
#include <cstring>

#include "nvst/error.hpp"
#include "runtime/heap_backing.hpp"

namespace nvst {

namespace {
class HostHeap final : public HeapBacking {
 public:
  explicit HostHeap(std::size_t bytes) : size_((bytes + 4095) / 4096 * 4096) {
    char* p = static_cast<char*>(std::aligned_alloc(4096, size_));
    NVST_REQUIRE(p != nullptr, "cannot allocate a host heap of ", size_, " bytes");
    std::memset(p, 0, size_);
    mem_ = std::shared_ptr<char>(p, [](char* q) { std::free(q); });
  }
  char* local_base() const override { return mem_.get(); }
  std::size_t size() const override { return size_; }
  char* peer_base(int) const override { return nullptr; }
  bool on_device() const override { return false; }
  std::shared_ptr<void> lease() const override { return mem_; }

 private:
  std::size_t size_;
  std::shared_ptr<char> mem_;  // freed with the last lease
};
}  // namespace

std::unique_ptr<HeapBacking> make_host_heap(std::size_t bytes) { return std::make_unique<HostHeap>(bytes); }

}  // namespace nvst
