// The seed tutorial's tma_copy: a device-to-device copy through Hopper's
// bulk copy engine (cp.async.bulk, the TMA's one-dimensional form).
#pragma once
#include <cstddef>

#include <cuda_runtime_api.h>

namespace nvst_py {

// dst <- src, nbytes, on `stream` (both on this GPU). When the pointers
// agree mod 16, everything but a head and a tail of under 16 bytes goes
// global -> shared -> global by bulk copies; those bytes (or all, when the
// pointers differ mod 16) go one by one. Throws
// nvst::Error on a launch failure; needs sm_90.
void tma_copy(void* dst, const void* src, std::size_t nbytes, cudaStream_t stream);

}  // namespace nvst_py
