// LogFMT-10: the optional compression of the low-latency combine (DeepEP's
// use_logfmt), written on its own here; host and device share this header so
// that the tests encode and decode as the kernels do (up to the per-value
// log2/exp2 approximation on the GPU: logfmt_log2).
//
// Expert outputs are mostly small numbers whose relative precision matters,
// so a group of 128 channels is sent as 10 bits per value instead of 16: a
// sign bit and a 9-bit code on a logarithmic scale spanning the group's own
// range of magnitudes. Code 0 is zero; code c in [1, 511] stands for
// 2^(lo + (c - 1) step), with lo = log2 of the smallest nonzero magnitude
// (at most 32 octaves below the largest) and step = (log2 amax - lo) / 510.
// Encoding rounds to the nearer level in linear terms, so a value's relative
// error is at most (2^step - 1) / 2: 2.2 % when the group spans 32 octaves,
// less when it spans fewer.
//
// As DeepEP does, only groups with every magnitude below 1 are compressed
// (and only when they hold two different magnitudes); any other group, and
// any group with a NaN or an infinity, is sent as plain bf16.
//
// On the wire a combine slot (ll_combine_slot_bytes) holds the groups'
// ranges first, 8 bytes each (float lo, float step; step < 0: sent as
// bf16), then the groups back to back: 160 bytes for a compressed group
// (16 lanes x 8 values x 10 bits), 256 for a bf16 one. Both are multiples
// of 16, so every group starts 16-byte aligned.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define NVST_LOGFMT_FN __host__ __device__ __forceinline__
#else
#define NVST_LOGFMT_FN inline
#endif

namespace nvst::ep::detail {

constexpr int kLogfmtGroup = 128;                // channels sharing one range
constexpr int kLogfmtLevels = 511;               // nonzero codes: 9 bits
constexpr float kLogfmtMaxOctaves = 32.0f;       // lo is at most this far below log2(amax)
constexpr std::size_t kLogfmtPackedBytes = 160;  // one compressed group: 128 x 10 bits
constexpr std::size_t kLogfmtBf16Bytes = 256;    // one group as bf16
constexpr std::uint64_t kCombineSentBf16 = 1;    // LowLatencyArgs::combine_format values
constexpr std::uint64_t kCombineSentLogfmt = 2;
constexpr std::uint64_t kCombineSentFp16 = 3;

// Bytes of the ranges at the head of a combine slot, and of the slot: a
// slot holds a row as bf16 (from byte 0) or as LogFMT (ranges, then groups).
constexpr std::size_t ll_logfmt_ranges_bytes(int hidden) {
  return (static_cast<std::size_t>(hidden) / kLogfmtGroup * 8 + 15) / 16 * 16;
}
constexpr std::size_t ll_combine_slot_bytes(int hidden) {
  return static_cast<std::size_t>(hidden) * 2 + ll_logfmt_ranges_bytes(hidden);
}

struct LogfmtRange {
  float lo, step;  // step < 0: the group is sent as bf16
};

// Folds one value into a group's largest magnitude and smallest nonzero one
// (start: amax = 0, amin = +inf). A NaN makes amax +inf, as an infinity
// does, so that logfmt_range sends its group as bf16.
NVST_LOGFMT_FN void logfmt_fold(float x, float& amax, float& amin) {
  const float m = fabsf(x);
  amax = m == m ? fmaxf(amax, m) : INFINITY;
  if (m > 0.0f) amin = fminf(amin, m);
}

// The range of a group from its folded amax and amin (logfmt_fold).
NVST_LOGFMT_FN LogfmtRange logfmt_range(float amax, float amin) {
  if (!(amax < 1.0f)) return {0.0f, -1.0f};
  if (amax == 0.0f) return {0.0f, 1.0f};  // all zero: every code is 0
  const float hi = log2f(amax);
  const float lo = fmaxf(log2f(amin), hi - kLogfmtMaxOctaves);
  if (!(lo < hi)) return {0.0f, -1.0f};  // one magnitude only: nothing to spread codes over
  return {lo, (hi - lo) / static_cast<float>(kLogfmtLevels - 1)};
}

// What encoding needs of a range, computed once per group: with u =
// (log2|x| - lo) / step, code = floor(u + bias) clamped to [0, 511], where
// bias = 2 - h and h = log2((1 + 2^step) / 2) / step is where the linear
// midpoint between two adjacent levels falls, in steps: a fractional part
// of u at or above h rounds up. (log2|x| - lo first: both are close, so the
// difference keeps float's precision.) Values below the lowest level by
// more than 1 - h steps become zero.
struct LogfmtEncoder {
  float lo, inv_step, bias;
};
NVST_LOGFMT_FN LogfmtEncoder logfmt_encoder(LogfmtRange r) {
  const float inv = 1.0f / r.step;
  return {r.lo, inv, 2.0f - log2f(0.5f * (1.0f + exp2f(r.step))) * inv};
}

NVST_LOGFMT_FN std::uint32_t logfmt_sign_bit(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x) >> 31;
#else
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u >> 31;
#endif
}

// A value's log2 and exp2. On the GPU, where they run once per value, the
// hardware's approximations (lg2.approx, ex2.approx: relative error about
// 2^-22, one instruction instead of a ~40-instruction polynomial; the
// accurate log2f made the combine send compute-bound). A value within
// that error of a level boundary may then get the neighbouring code, and a
// decoded value may differ from the host's in the last bits: the error bound
// above still holds (to about 1e-6 relative; results below 2^-126 flush to
// zero). Ranges (once per group) use the accurate functions everywhere.
NVST_LOGFMT_FN float logfmt_log2(float m) {
#if defined(__CUDA_ARCH__)
  return __log2f(m);
#else
  return log2f(m);
#endif
}
NVST_LOGFMT_FN float logfmt_exp2(float y) {
#if defined(__CUDA_ARCH__)
  float r;  // CUDA names no intrinsic for it
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(y));
  return r;
#else
  return exp2f(y);
#endif
}

// 10 bits: the sign (bit 9) and the code.
NVST_LOGFMT_FN std::uint32_t logfmt_encode(float x, LogfmtEncoder e) {
  const std::uint32_t sign = logfmt_sign_bit(x) << 9;
  const float m = fabsf(x);
  if (!(m > 0.0f)) return sign;
  const float c = floorf((logfmt_log2(m) - e.lo) * e.inv_step + e.bias);
  const std::uint32_t code = c <= 0.0f ? 0u : (c >= kLogfmtLevels ? kLogfmtLevels : static_cast<std::uint32_t>(c));
  return sign | code;
}

NVST_LOGFMT_FN float logfmt_decode(std::uint32_t bits, LogfmtRange r) {
  const std::uint32_t code = bits & 511u;
  const float m = code == 0 ? 0.0f : logfmt_exp2(r.lo + static_cast<float>(code - 1) * r.step);
  return (bits >> 9) & 1u ? -m : m;
}

// Eight 10-bit values in 80 bits, value j at bits [10 j, 10 j + 10), kept
// as five 16-bit words (a lane's 10 bytes start only 2-byte aligned).
NVST_LOGFMT_FN void logfmt_pack8(const std::uint32_t (&v)[8], std::uint16_t (&w)[5]) {
  std::uint64_t low = 0;  // bits 0..63
  for (int j = 0; j < 6; ++j) low |= static_cast<std::uint64_t>(v[j] & 1023u) << (10 * j);
  low |= static_cast<std::uint64_t>(v[6] & 15u) << 60;
  for (int i = 0; i < 4; ++i) w[i] = static_cast<std::uint16_t>(low >> (16 * i));
  w[4] = static_cast<std::uint16_t>(((v[6] & 1023u) >> 4) | ((v[7] & 1023u) << 6));
}
NVST_LOGFMT_FN void logfmt_unpack8(const std::uint16_t (&w)[5], std::uint32_t (&v)[8]) {
  std::uint64_t low = 0;
  for (int i = 0; i < 4; ++i) low |= static_cast<std::uint64_t>(w[i]) << (16 * i);
  for (int j = 0; j < 6; ++j) v[j] = static_cast<std::uint32_t>(low >> (10 * j)) & 1023u;
  v[6] = static_cast<std::uint32_t>(low >> 60) | ((static_cast<std::uint32_t>(w[4]) & 63u) << 4);
  v[7] = static_cast<std::uint32_t>(w[4]) >> 6;
}

}  // namespace nvst::ep::detail
