// The collectives' CPU reference, shared by the GPU tests (tests/gpu) and
// the host-memory tests (tests/host): random inputs per PE, and a combine
// that rounds exactly as the library does (float arithmetic, rounded to the
// element type after every step), so results must match bit for bit.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "nvst/coll.hpp"

namespace nvst::test {

using nvst::coll::DType;
using nvst::coll::RedOp;

// Random element bits for (pe, i): small values so float sums stay exact-ish
// and ints do not overflow; never all zeros.
inline std::vector<std::uint8_t> make_input(DType t, std::size_t n, int pe, std::uint64_t salt,
                                            std::uint64_t seed) {
  std::mt19937_64 rng(seed * 1000003 + static_cast<std::uint64_t>(pe) * 7919 + salt);
  std::uniform_real_distribution<float> u(-4.f, 4.f);
  std::vector<std::uint8_t> out(n * nvst::coll::dtype_size(t));
  for (std::size_t i = 0; i < n; ++i) {
    const float f = u(rng);
    switch (t) {
      case DType::kF32: std::memcpy(&out[i * 4], &f, 4); break;
      case DType::kBF16: { __nv_bfloat16 h = __float2bfloat16(f); std::memcpy(&out[i * 2], &h, 2); break; }
      case DType::kF16: { __half h = __float2half(f); std::memcpy(&out[i * 2], &h, 2); break; }
      case DType::kI32: { std::int32_t v = static_cast<std::int32_t>(rng() % 20001) - 10000; std::memcpy(&out[i * 4], &v, 4); break; }
    }
  }
  return out;
}

inline float to_float(DType t, const std::uint8_t* p) {
  switch (t) {
    case DType::kF32: { float f; std::memcpy(&f, p, 4); return f; }
    case DType::kBF16: { __nv_bfloat16 h; std::memcpy(&h, p, 2); return __bfloat162float(h); }
    case DType::kF16: { __half h; std::memcpy(&h, p, 2); return __half2float(h); }
    case DType::kI32: { std::int32_t v; std::memcpy(&v, p, 4); return static_cast<float>(v); }
  }
  return 0;
}

// a = a op b in the element type, as the GPU does it.
inline void combine(DType t, RedOp op, std::uint8_t* a, const std::uint8_t* b) {
  if (t == DType::kI32) {
    std::int32_t x, y;
    std::memcpy(&x, a, 4);
    std::memcpy(&y, b, 4);
    x = op == RedOp::kSum ? x + y : op == RedOp::kMax ? std::max(x, y) : std::min(x, y);
    std::memcpy(a, &x, 4);
    return;
  }
  const float x = to_float(t, a), y = to_float(t, b);
  const float r = op == RedOp::kSum ? x + y : op == RedOp::kMax ? (x > y ? x : y) : (x < y ? x : y);
  switch (t) {
    case DType::kF32: std::memcpy(a, &r, 4); break;
    case DType::kBF16: { __nv_bfloat16 h = op == RedOp::kSum ? __float2bfloat16(r) : (x > y) == (op == RedOp::kMax) ? *reinterpret_cast<const __nv_bfloat16*>(a) : *reinterpret_cast<const __nv_bfloat16*>(b); std::memcpy(a, &h, 2); break; }
    case DType::kF16: { __half h = op == RedOp::kSum ? __float2half(r) : (x > y) == (op == RedOp::kMax) ? *reinterpret_cast<const __half*>(a) : *reinterpret_cast<const __half*>(b); std::memcpy(a, &h, 2); break; }
    default: break;
  }
}


}  // namespace nvst::test
