// The structures' operations (ops_common.hpp) for host threads: the host
// API's atomics and put_signal. Remote words may be on any PE; the local
// ones (load_acquire, store_release, wait_local_ge, copy_local) need a host
// heap. Waits end after NVST_TIMEOUT_S with nvst::Error naming what was
// awaited.
#pragma once

#include <cstddef>
#include <cstdint>

namespace nvst::structures {

struct HostOps {
  static std::uint64_t fetch(std::uint64_t* word, int pe);
  static std::uint64_t fetch_add(std::uint64_t* word, std::uint64_t value, int pe);
  static std::uint64_t compare_swap(std::uint64_t* word, std::uint64_t cond, std::uint64_t value, int pe);
  static std::uint64_t swap(std::uint64_t* word, std::uint64_t value, int pe);
  static void fence();
  // Blocking: `src` may be reused on return.
  static void put_signal(void* dest, const void* src, std::size_t bytes, std::uint64_t* sig, std::uint64_t value,
                         int pe);
  static std::uint64_t load_acquire(const std::uint64_t* word);
  static void store_release(std::uint64_t* word, std::uint64_t value);
  static void copy_local(void* dst, const void* src, std::size_t bytes);
  static void wait_ge(std::uint64_t* word, std::uint64_t value, int pe, const char* what);
  static void wait_local_ge(const std::uint64_t* word, std::uint64_t value, const char* what);
};

}  // namespace nvst::structures
