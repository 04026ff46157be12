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
#include <type_traits>
#include <vector>

#include "coll/ring_layout.hpp"
#include "nvst/coll.hpp"

namespace nvst::test {

using nvst::coll::DType;
using nvst::coll::RedOp;

inline constexpr DType kAllDTypes[] = {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64};
inline constexpr RedOp kAllOps[] = {RedOp::kSum, RedOp::kMax, RedOp::kMin, RedOp::kProd};

// Random element bits for (pe, i): small values so float sums stay exact-ish
// and ints do not overflow; never all zeros.
inline std::vector<std::uint8_t> make_input(DType t, std::size_t n, int pe, std::uint64_t salt, std::uint64_t seed) {
  std::mt19937_64 rng(seed * 1000003 + static_cast<std::uint64_t>(pe) * 7919 + salt);
  std::uniform_real_distribution<float> u(-4.f, 4.f);
  std::vector<std::uint8_t> out(n * nvst::coll::dtype_size(t));
  for (std::size_t i = 0; i < n; ++i) {
    const float f = u(rng);
    switch (t) {
      case DType::kF32: std::memcpy(&out[i * 4], &f, 4); break;
      case DType::kBF16: {
        __nv_bfloat16 h = __float2bfloat16(f);
        std::memcpy(&out[i * 2], &h, 2);
        break;
      }
      case DType::kF16: {
        __half h = __float2half(f);
        std::memcpy(&out[i * 2], &h, 2);
        break;
      }
      case DType::kI32: {
        std::int32_t v = static_cast<std::int32_t>(rng() % 20001) - 10000;
        std::memcpy(&out[i * 4], &v, 4);
        break;
      }
      case DType::kI64: {
        std::int64_t v = static_cast<std::int64_t>(rng() % 2000001) - 1000000;
        std::memcpy(&out[i * 8], &v, 8);
        break;
      }
    }
  }
  return out;
}

inline float to_float(DType t, const std::uint8_t* p) {
  switch (t) {
    case DType::kF32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case DType::kBF16: {
      __nv_bfloat16 h;
      std::memcpy(&h, p, 2);
      return __bfloat162float(h);
    }
    case DType::kF16: {
      __half h;
      std::memcpy(&h, p, 2);
      return __half2float(h);
    }
    case DType::kI32: {
      std::int32_t v;
      std::memcpy(&v, p, 4);
      return static_cast<float>(v);
    }
    case DType::kI64: {
      std::int64_t v;
      std::memcpy(&v, p, 8);
      return static_cast<float>(v);
    }
  }
  return 0;
}

// Integers: x op y, wrapping as two's complement (unsigned arithmetic).
template <typename I>
inline void combine_int(RedOp op, std::uint8_t* a, const std::uint8_t* b) {
  using U = std::make_unsigned_t<I>;
  I x, y;
  std::memcpy(&x, a, sizeof(I));
  std::memcpy(&y, b, sizeof(I));
  x = op == RedOp::kSum    ? static_cast<I>(static_cast<U>(x) + static_cast<U>(y))
      : op == RedOp::kProd ? static_cast<I>(static_cast<U>(x) * static_cast<U>(y))
      : op == RedOp::kMax  ? std::max(x, y)
                           : std::min(x, y);
  std::memcpy(a, &x, sizeof(I));
}

// a = a op b in the element type, as the GPU does it.
inline void combine(DType t, RedOp op, std::uint8_t* a, const std::uint8_t* b) {
  if (t == DType::kI32) return combine_int<std::int32_t>(op, a, b);
  if (t == DType::kI64) return combine_int<std::int64_t>(op, a, b);
  const float x = to_float(t, a), y = to_float(t, b);
  const bool arith = op == RedOp::kSum || op == RedOp::kProd;
  const float r = op == RedOp::kSum    ? x + y
                  : op == RedOp::kProd ? x * y
                  : op == RedOp::kMax  ? (x > y ? x : y)
                                       : (x < y ? x : y);
  switch (t) {
    case DType::kF32: std::memcpy(a, &r, 4); break;
    case DType::kBF16: {
      __nv_bfloat16 h = arith                            ? __float2bfloat16(r)
                        : (x > y) == (op == RedOp::kMax) ? *reinterpret_cast<const __nv_bfloat16*>(a)
                                                         : *reinterpret_cast<const __nv_bfloat16*>(b);
      std::memcpy(a, &h, 2);
      break;
    }
    case DType::kF16: {
      __half h = arith                            ? __float2half(r)
                 : (x > y) == (op == RedOp::kMax) ? *reinterpret_cast<const __half*>(a)
                                                  : *reinterpret_cast<const __half*>(b);
      std::memcpy(a, &h, 2);
      break;
    }
    default: break;
  }
}

// The reduction of every PE's input (equal lengths), in PE order.
inline std::vector<std::uint8_t> reduce_expected(DType t, RedOp op, const std::vector<std::vector<std::uint8_t>>& in) {
  const std::size_t es = nvst::coll::dtype_size(t);
  std::vector<std::uint8_t> want = in[0];
  for (std::size_t p = 1; p < in.size(); ++p)
    for (std::size_t i = 0; i < want.size() / es; ++i) combine(t, op, &want[i * es], &in[p][i * es]);
  return want;
}

// The ring all_reduce's result: element i reduced in ring order starting at
// the member whose segment holds it (src/coll/ring_layout.hpp).
inline std::vector<std::uint8_t> ring_reduce_expected(DType t, RedOp op,
                                                      const std::vector<std::vector<std::uint8_t>>& in) {
  const std::size_t es = nvst::coll::dtype_size(t), count = in[0].size() / es, n = in.size();
  std::vector<std::uint8_t> want(in[0].size());
  for (std::size_t i = 0; i < count; ++i) {
    const auto first = static_cast<std::size_t>(nvst::coll::ring::first_member(i, count, static_cast<int>(n), es));
    std::memcpy(&want[i * es], &in[first][i * es], es);
    for (std::size_t j = 1; j < n; ++j) combine(t, op, &want[i * es], &in[(first + j) % n][i * es]);
  }
  return want;
}

// An all_to_allv layout every PE derives alike from `seed`: counts[s][r]
// elements from PE s to PE r (random, about a quarter zeros; `big`, if not
// 0, from PE 0 to the last PE), send displacements in peer order and receive
// displacements in reverse peer order, both with random gaps.
struct VLayout {
  std::vector<std::vector<std::size_t>> counts;                    // [from][to]
  std::vector<std::vector<std::size_t>> send_displs, recv_displs;  // [pe][peer]
  std::vector<std::size_t> in_len, out_len;                        // elements per PE
  std::vector<std::size_t> recv_counts(int me) const {
    std::vector<std::size_t> c;
    for (const auto& row : counts) c.push_back(row[static_cast<std::size_t>(me)]);
    return c;
  }
};

inline VLayout make_v_layout(int n, std::uint64_t seed, std::size_t max_count, std::size_t big = 0) {
  std::mt19937_64 rng(seed);
  const std::size_t un = static_cast<std::size_t>(n);
  VLayout l;
  l.counts.assign(un, std::vector<std::size_t>(un));
  for (std::size_t s = 0; s < un; ++s)
    for (std::size_t r = 0; r < un; ++r) l.counts[s][r] = rng() % 4 == 0 ? 0 : rng() % (max_count + 1);
  if (big) l.counts[0][un - 1] = big;
  l.send_displs.assign(un, std::vector<std::size_t>(un));
  l.recv_displs.assign(un, std::vector<std::size_t>(un));
  for (std::size_t pe = 0; pe < un; ++pe) {
    std::size_t off = 0;
    for (std::size_t r = 0; r < un; ++r) {
      off += rng() % 5;
      l.send_displs[pe][r] = off;
      off += l.counts[pe][r];
    }
    l.in_len.push_back(off + rng() % 5);
    off = 0;
    for (std::size_t s = un; s-- > 0;) {
      off += rng() % 5;
      l.recv_displs[pe][s] = off;
      off += l.counts[s][pe];
    }
    l.out_len.push_back(off + rng() % 5);
  }
  return l;
}

// PE me's expected all_to_allv output (poison 0xA5 in the gaps), from every
// PE's input bytes.
inline std::vector<std::uint8_t> v_expected(const VLayout& l, int me, const std::vector<std::vector<std::uint8_t>>& in,
                                            std::size_t es) {
  const std::size_t m = static_cast<std::size_t>(me);
  std::vector<std::uint8_t> want(l.out_len[m] * es, 0xA5);
  for (std::size_t s = 0; s < in.size(); ++s)
    if (l.counts[s][m])
      std::memcpy(&want[l.recv_displs[m][s] * es], &in[s][l.send_displs[s][m] * es], l.counts[s][m] * es);
  return want;
}

// PE me's expected all_to_all output: part p is part me of PE p's input.
inline std::vector<std::uint8_t> a2a_expected(int me, const std::vector<std::vector<std::uint8_t>>& in,
                                              std::size_t part_bytes) {
  std::vector<std::uint8_t> want;
  for (const auto& x : in)
    want.insert(want.end(), x.begin() + static_cast<std::ptrdiff_t>(me * part_bytes),
                x.begin() + static_cast<std::ptrdiff_t>((me + 1) * part_bytes));
  return want;
}

}  // namespace nvst::test
