// HostOps (nvst/structures/host_ops.hpp): the host API under the structures.
#include "nvst/structures/host_ops.hpp"

#include <atomic>
#include <chrono>
#include <cstring>

#include "nvst/error.hpp"
#include "nvst/nvst.hpp"
#include "base/backoff.hpp"

namespace nvst::structures {

namespace {
// Polls read() until it is >= value, then an acquire fence (ops_common.hpp:
// a wait is an acquire); throws after NVST_TIMEOUT_S naming `what`.
template <typename Read>
void wait_until_ge(Read read, std::uint64_t value, int pe, const char* what) {
  std::uint64_t seen = read();
  if (seen >= value) return std::atomic_thread_fence(std::memory_order_acquire);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(host_timeout_seconds());
  for (detail::Backoff backoff;; backoff.pause()) {
    if ((seen = read()) >= value) return std::atomic_thread_fence(std::memory_order_acquire);
    if (backoff.check_clock() && std::chrono::steady_clock::now() > deadline)
      NVST_FAIL("timed out after ", host_timeout_seconds(), " s waiting for ", what, " on PE ", pe, ": the word holds ",
                seen, ", needs >= ", value, " (NVST_TIMEOUT_S)");
  }
}
}  // namespace

std::uint64_t HostOps::fetch(std::uint64_t* word, int pe) { return atomic_fetch(word, pe); }
std::uint64_t HostOps::fetch_add(std::uint64_t* word, std::uint64_t value, int pe) {
  return atomic_fetch_add(word, value, pe);
}
std::uint64_t HostOps::compare_swap(std::uint64_t* word, std::uint64_t cond, std::uint64_t value, int pe) {
  return atomic_compare_swap(word, cond, value, pe);
}
std::uint64_t HostOps::swap(std::uint64_t* word, std::uint64_t value, int pe) { return atomic_swap(word, value, pe); }
void HostOps::fence() { nvst::fence(); }
void HostOps::put_signal(void* dest, const void* src, std::size_t bytes, std::uint64_t* sig, std::uint64_t value,
                         int pe) {
  putmem_signal_nbi(dest, src, bytes, sig, value, SignalOp::kSet, pe);
  quiet();
}
std::uint64_t HostOps::load_acquire(const std::uint64_t* word) {
  return std::atomic_ref<const std::uint64_t>(*word).load(std::memory_order_acquire);
}
void HostOps::store_release(std::uint64_t* word, std::uint64_t value) {
  std::atomic_ref<std::uint64_t>(*word).store(value, std::memory_order_release);
}
void HostOps::copy_local(void* dst, const void* src, std::size_t bytes) { std::memcpy(dst, src, bytes); }
void HostOps::wait_ge(std::uint64_t* word, std::uint64_t value, int pe, const char* what) {
  wait_until_ge([&] { return atomic_fetch(word, pe); }, value, pe, what);
}
void HostOps::wait_local_ge(const std::uint64_t* word, std::uint64_t value, const char* what) {
  wait_until_ge([&] { return load_acquire(word); }, value, my_pe(), what);
}

}  // namespace nvst::structures
