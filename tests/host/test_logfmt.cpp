// LogFMT-10, the low-latency combine's optional compression (src/ep/logfmt.hpp):
// the same functions the kernels call, run on the host. What they promise:
// the 80-bit packing is lossless, a value comes back within half a level
// (relative error at most (2^step - 1) / 2), zero and signs survive, and
// groups that are not all under 1 in magnitude are left as bf16.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "ep/logfmt.hpp"

using namespace nvst::ep::detail;

namespace {

// The range of a group as the kernel computes it.
LogfmtRange range_of(const std::vector<float>& g) {
  float amax = 0.0f, amin = INFINITY;
  for (float x : g) logfmt_fold(x, amax, amin);
  return logfmt_range(amax, amin);
}

float level(LogfmtRange r, std::uint32_t code) { return logfmt_decode(code, r); }

}  // namespace

TEST(Logfmt, PackingIsLosslessAndPutsValueJAtBit10J) {
  std::mt19937 rng(7);
  for (int it = 0; it < 10000; ++it) {
    std::uint32_t v[8], back[8];
    for (auto& x : v) x = rng() & 1023u;
    std::uint16_t w[5];
    logfmt_pack8(v, w);
    logfmt_unpack8(w, back);
    for (int j = 0; j < 8; ++j) ASSERT_EQ(back[j], v[j]) << "value " << j;
  }
  for (int j = 0; j < 8; ++j) {  // one value of all ones: exactly bits [10 j, 10 j + 10) set
    std::uint32_t v[8] = {};
    v[j] = 1023u;
    std::uint16_t w[5];
    logfmt_pack8(v, w);
    for (int bit = 0; bit < 80; ++bit)
      EXPECT_EQ((w[bit / 16] >> (bit % 16)) & 1, bit / 10 == j ? 1 : 0) << "value " << j << " bit " << bit;
  }
}

TEST(Logfmt, OnlyGroupsUnderOneWithTwoMagnitudesAreCompressed) {
  EXPECT_LT(logfmt_range(1.0f, 0.5f).step, 0.0f);  // a value of magnitude 1
  EXPECT_LT(logfmt_range(3.0f, 0.1f).step, 0.0f);
  EXPECT_LT(logfmt_range(INFINITY, 0.1f).step, 0.0f);  // NaN or infinity in the group
  EXPECT_LT(range_of({0.25f, NAN, 0.5f}).step, 0.0f);
  EXPECT_LT(logfmt_range(0.5f, 0.5f).step, 0.0f);  // one magnitude: nothing to spread codes over
  EXPECT_LT(range_of({0.5f, -0.5f, 0.0f}).step, 0.0f);
  const LogfmtRange zero = logfmt_range(0.0f, INFINITY);  // all zero: compressed, every code 0
  EXPECT_GT(zero.step, 0.0f);
  EXPECT_EQ(logfmt_encode(0.0f, logfmt_encoder(zero)), 0u);
  // Negative zero keeps its sign bit and code 0.
  EXPECT_EQ(logfmt_encode(-0.0f, logfmt_encoder(logfmt_range(0.5f, 0.125f))), 1u << 9);
  EXPECT_TRUE(std::signbit(logfmt_decode(1u << 9, logfmt_range(0.5f, 0.125f))));
  const LogfmtRange r = logfmt_range(0.5f, 0.125f);
  EXPECT_FLOAT_EQ(r.lo, -3.0f);
  EXPECT_FLOAT_EQ(r.step, 2.0f / 510);
  // A group spanning more than 32 octaves keeps the top 32.
  const LogfmtRange wide = logfmt_range(0.5f, std::ldexp(1.0f, -60));
  EXPECT_FLOAT_EQ(wide.lo, -33.0f);
  EXPECT_FLOAT_EQ(wide.step, 32.0f / 510);
}

TEST(Logfmt, ValuesComeBackWithinHalfALevelSignsAndZerosExact) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  int compressed = 0;
  for (int it = 0; it < 3000; ++it) {
    // Groups of different spans: the largest magnitude 2^-1..2^-12, the
    // smallest down to 2^-45 below it (clipped at 32 octaves).
    const float top = std::ldexp(1.0f, -1 - static_cast<int>(rng() % 12)) * (0.5f + 0.49f * unit(rng));
    const float octaves = 45.0f * unit(rng) + 0.01f;
    std::vector<float> g(kLogfmtGroup);
    for (auto& x : g) {
      const float m = top * std::exp2(-octaves * unit(rng));
      x = (rng() % 2 ? -m : m);
    }
    g[rng() % kLogfmtGroup] = 0.0f;
    g[rng() % kLogfmtGroup] = top;  // the largest is in the group
    const LogfmtRange r = range_of(g);
    ASSERT_GE(r.step, 0.0f) << "a group under 1 with two magnitudes must be compressed";
    ++compressed;
    const LogfmtEncoder enc = logfmt_encoder(r);
    const float half_level = (std::exp2(r.step) - 1.0f) / 2.0f;
    EXPECT_LE(half_level, 0.0223f);  // the documented bound: 2.2 % at 32 octaves
    for (float x : g) {
      const std::uint32_t bits = logfmt_encode(x, enc);
      const float back = logfmt_decode(bits, r);
      const float m = std::fabs(x);
      if (x == 0.0f) {
        EXPECT_EQ(back, 0.0f);
        continue;
      }
      // Values more than 32 octaves below the top may round to zero or to
      // the lowest level: off by at most that level.
      const float floor_level = std::exp2(r.lo);
      // Float's log2 decides the rounding only to a few millionths of an
      // octave: allow 1e-5 of x beyond half a level.
      const float slack = m * 1e-5f;
      const float bound = m >= floor_level ? m * half_level + slack : floor_level * 1.0001f;
      EXPECT_LE(std::fabs(back - x), bound) << "x " << x << " code " << (bits & 511) << " span " << octaves;
      if (back != 0.0f) {
        EXPECT_EQ(std::signbit(back), std::signbit(x));
      }
      // The nearer of the two neighbouring levels was chosen.
      const std::uint32_t code = bits & 511u;
      if (code >= 1 && code < kLogfmtLevels && m >= floor_level) {
        const float here = std::fabs(m - level(r, code)), up = std::fabs(m - level(r, code + 1));
        const float down = code > 1 ? std::fabs(m - level(r, code - 1)) : m;
        EXPECT_LE(here, up + slack) << "x " << x;
        EXPECT_LE(here, down + slack) << "x " << x;
      }
    }
    EXPECT_NEAR(logfmt_decode(logfmt_encode(top, enc), r), top, top * 1e-5f);  // the top is a level
  }
  EXPECT_EQ(compressed, 3000);
}

TEST(Logfmt, SlotHoldsARowOfBf16GroupsAfterItsRanges) {
  for (int hidden : {128, 256, 384, 2048, 7168}) {
    SCOPED_TRACE(testing::Message() << "hidden " << hidden);
    const std::size_t groups = static_cast<std::size_t>(hidden) / kLogfmtGroup;
    EXPECT_GE(ll_logfmt_ranges_bytes(hidden), groups * 8);
    EXPECT_EQ(ll_logfmt_ranges_bytes(hidden) % 16, 0u);
    // Worst case: every group left as bf16.
    EXPECT_EQ(ll_combine_slot_bytes(hidden), ll_logfmt_ranges_bytes(hidden) + groups * kLogfmtBf16Bytes);
    EXPECT_EQ(ll_combine_slot_bytes(hidden) % 16, 0u);
  }
  EXPECT_EQ(kLogfmtPackedBytes % 16, 0u);  // every group starts 16-byte aligned
  EXPECT_EQ(kLogfmtPackedBytes * 8, static_cast<std::size_t>(kLogfmtGroup) * 10);
}
