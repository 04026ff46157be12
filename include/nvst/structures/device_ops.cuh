// The structures' operations (ops_common.hpp) for GPU threads: the device
// API (thread scope). A wait that outlives NVST_DEVICE_TIMEOUT_S prints what
// it waited for and stops the kernel through the device mailbox, naming the
// PE and the word's offset.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>

#include "nvst/device.cuh"

#ifdef __CUDACC__
namespace nvst::structures {

struct DeviceOps {
  __device__ static std::uint64_t fetch(std::uint64_t* word, int pe) { return dev::atomic_fetch(word, pe); }
  __device__ static std::uint64_t fetch_add(std::uint64_t* word, std::uint64_t value, int pe) {
    return dev::atomic_fetch_add(word, value, pe);
  }
  __device__ static std::uint64_t compare_swap(std::uint64_t* word, std::uint64_t cond, std::uint64_t value, int pe) {
    return dev::atomic_compare_swap(word, cond, value, pe);
  }
  __device__ static std::uint64_t swap(std::uint64_t* word, std::uint64_t value, int pe) {
    return dev::atomic_swap(word, value, pe);
  }
  __device__ static void fence() { dev::fence(); }
  __device__ static void put_signal(void* dest, const void* src, std::size_t bytes, std::uint64_t* sig,
                                    std::uint64_t value, int pe) {
    dev::putmem_signal(dest, src, bytes, sig, value, dev::SignalOp::kSet, pe);
  }
  __device__ static std::uint64_t load_acquire(const std::uint64_t* word) { return dev::detail::ld_acquire_sys(word); }
  __device__ static void store_release(std::uint64_t* word, std::uint64_t value) {
    dev::detail::st_release_sys(word, value);
  }
  __device__ static void copy_local(void* dst, const void* src, std::size_t bytes) { memcpy(dst, src, bytes); }
  // A wait is an acquire: what this thread reads or writes after it stays
  // after the value it waited for (the ring's producer writes a slot only
  // after it saw the consumer's head pass it). On timeout it prints `what`
  // and stops the kernel through the device mailbox (PE, word, values).
  __device__ static void wait_ge(std::uint64_t* word, std::uint64_t value, int pe, const char* what) {
    std::uint64_t seen = 0;
    dev::detail::spin_until([&] { return (seen = dev::atomic_fetch(word, pe)) >= value; },
                            [&] { timed_out(word, seen, value, pe, what); });
    __threadfence_system();
  }
  __device__ static void wait_local_ge(const std::uint64_t* word, std::uint64_t value, const char* what) {
    dev::check_symmetric(word, sizeof(std::uint64_t));
    std::uint64_t seen = 0;
    dev::detail::spin_until([&] { return (seen = dev::detail::ld_acquire_sys(word)) >= value; },
                            [&] { timed_out(word, seen, value, dev::state().my_pe, what); });
  }

 private:
  __device__ static void timed_out(const std::uint64_t* word, std::uint64_t seen, std::uint64_t value, int pe,
                                   const char* what) {
    printf(
        "[nvst PE %d] timed out (NVST_DEVICE_TIMEOUT_S) waiting for %s on PE %d: the word holds %llu, needs >= %llu\n",
        dev::state().my_pe, what, pe, static_cast<unsigned long long>(seen), static_cast<unsigned long long>(value));
    dev::fail(dev::FailKind::kWaitTimeout, pe, dev::heap_offset(word), seen, value, static_cast<int>(dev::Cmp::kGe));
  }
};

}  // namespace nvst::structures
#endif  // __CUDACC__
