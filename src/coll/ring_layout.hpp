// How the ring all_reduce splits a buffer, shared by its kernel, its
// host-memory version and the tests' bit-exact reference.
//
// `count` elements are cut into one segment per member, S elements each
// (the last ones shorter or empty), S a whole number of 16-byte vectors so
// every segment starts aligned. Segment s is reduced around the ring
// starting at member s: in_s op in_(s+1) op ... op in_(s+n-1), indices mod n.
// The split does not depend on the workspace size: a buffer too large for
// one launch is taken a slice of every segment per launch.
#pragma once

#include <cstddef>

namespace nvst::coll::ring {

// Elements per segment (0 when count is 0).
inline constexpr std::size_t segment_elems(std::size_t count, int npes, std::size_t elem_bytes) {
  const std::size_t v = 16 / elem_bytes;
  const std::size_t per = (count + static_cast<std::size_t>(npes) - 1) / static_cast<std::size_t>(npes);
  return (per + v - 1) / v * v;
}

// The member whose input starts element i's reduction.
inline constexpr int first_member(std::size_t i, std::size_t count, int npes, std::size_t elem_bytes) {
  const std::size_t s = segment_elems(count, npes, elem_bytes);
  return s == 0 ? 0 : static_cast<int>(i / s);
}

// Steps a ring all_reduce takes: n - 1 to reduce, n - 1 to share.
inline constexpr int steps(int npes) { return 2 * npes - 2; }

// Elements of every segment one launch takes: as many as fit when each of
// the steps(n) regions of a workspace buffer of `chunk_bytes` holds one
// slice (at least one 16-byte vector).
inline constexpr std::size_t slice_elems(std::size_t chunk_bytes, int npes, std::size_t elem_bytes) {
  const std::size_t v = 16 / elem_bytes, regions = static_cast<std::size_t>(steps(npes) > 1 ? steps(npes) : 1);
  const std::size_t per = chunk_bytes / elem_bytes / regions / v * v;
  return per > v ? per : v;
}

// Elements [from, to) of the buffer that member `me` sends at step k: those
// of segment (me - k) mod n at [lo, hi) of the segment, clipped to its end.
struct Span {
  std::size_t from, to;
};
inline constexpr Span step_span(int me, int k, int npes, std::size_t count, std::size_t seg, std::size_t lo,
                                std::size_t hi) {
  const std::size_t seg0 = static_cast<std::size_t>(((me - k) % npes + npes) % npes) * seg;
  const std::size_t len = count > seg0 ? (count - seg0 < seg ? count - seg0 : seg) : 0;
  return {seg0 + (lo < len ? lo : len), seg0 + (hi < len ? hi : len)};
}

}  // namespace nvst::coll::ring
