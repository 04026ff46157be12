// What the distributed structures (hash_map.hpp, ring_buffer.hpp) share:
// the annotations that let one template run on host threads and in kernels.
// Each structure's algorithm is a function template over `Ops`, the set of
// one-sided operations it needs, with the same names on both sides:
//   fetch, fetch_add, compare_swap, swap   remote atomics on 64-bit words
//   fence                                  orders this PE's earlier operations before later ones
//   put_signal(dest, src, bytes, sig, value, pe)  data, then sig = value, visible in that order
//   load_acquire / store_release           this PE's own words
//   copy_local(dst, src, bytes)            out of this PE's own memory
//   wait_ge(word, value, pe, what)         a word on `pe`, until >= value (timeout: fail naming `what`)
//   wait_local_ge(word, value, what)       this PE's word, the same
// Both waits are acquires: this thread's later reads and writes stay after
// the value it waited for.
// HostOps (host_ops.hpp) maps them to the host API, DeviceOps
// (device_ops.cuh) to the device API.
#pragma once

#if defined(__CUDACC__)
#define NVST_HD __host__ __device__
// The templates call Ops' host-only or device-only functions; each is
// instantiated on one side only, which nvcc cannot see: no warning.
#define NVST_HD_TEMPLATE _Pragma("nv_exec_check_disable")
#else
#define NVST_HD
#define NVST_HD_TEMPLATE
#endif
