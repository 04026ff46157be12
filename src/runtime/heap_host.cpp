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
    base_ = static_cast<char*>(std::aligned_alloc(4096, size_));
    NVST_REQUIRE(base_ != nullptr, "cannot allocate a host heap of ", size_, " bytes");
    std::memset(base_, 0, size_);
  }
  ~HostHeap() override { std::free(base_); }
  char* local_base() const override { return base_; }
  std::size_t size() const override { return size_; }
  char* peer_base(int) const override { return nullptr; }
  bool on_device() const override { return false; }

 private:
  std::size_t size_;
  char* base_;
};
}  // namespace

std::unique_ptr<HeapBacking> make_host_heap(std::size_t bytes) {
  return std::make_unique<HostHeap>(bytes);
}

}  // namespace nvst
