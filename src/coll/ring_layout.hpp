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

}  // namespace nvst::coll::ring
