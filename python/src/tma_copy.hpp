// The seed tutorial's tma_copy: a device-to-device copy through Hopper's
// bulk copy engine (cp.async.bulk, the TMA's one-dimensional form).
#pragma once
#include <cstddef>

#include <cuda_runtime_api.h>

namespace nvst_py {

// dst <- src, nbytes, on `stream` (both on this GPU). Spans 16-byte aligned
// in both go global -> shared -> global by bulk copies; the rest (or all,
// when the two pointers differ in alignment mod 16) byte by byte. Throws
// nvst::Error on a launch failure; needs sm_90.
void tma_copy(void* dst, const void* src, std::size_t nbytes, cudaStream_t stream);

}  // namespace nvst_py
