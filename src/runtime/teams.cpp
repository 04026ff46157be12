#include "runtime/teams.hpp"

#include <algorithm>

#include "nvst/error.hpp"

namespace nvst::detail {

namespace {
TeamShape make(int start, int stride, int size, int my_pe, bool in_parent) {
  TeamShape s{start, stride, size, -1};
  const int off = my_pe - start;
  if (in_parent && off >= 0 && off % stride == 0 && off / stride < size) s.my_index = off / stride;
  return s;
}
}  // namespace

TeamTable::TeamTable(int world, int my_pe, int node_first, int node_size) : my_pe_(my_pe) {
  teams_.push_back(make(0, 1, world, my_pe, true));               // Team::kWorld
  teams_.push_back(make(node_first, 1, node_size, my_pe, true));  // Team::kNode
}

const TeamShape& TeamTable::shape(Team team, const char* fn) const {
  const int h = static_cast<int>(team);
  NVST_REQUIRE(h >= 0 && h < count(), "nvst::", fn, ": team ", h, h < 0 ? " is Team::kInvalid" : " was never created",
               " (", count(), " teams exist)");
  return teams_[static_cast<std::size_t>(h)];
}

TeamShape TeamTable::split_strided(Team parent, int start, int stride, int size, const char* fn) const {
  const TeamShape& p = shape(parent, fn);
  NVST_REQUIRE(start >= 0 && stride >= 1 && size >= 1, "nvst::", fn, ": start ", start, ", stride ", stride, ", size ",
               size, " (need start >= 0, stride >= 1, size >= 1)");
  const long long last = start + static_cast<long long>(size - 1) * stride;
  NVST_REQUIRE(last < p.size, "nvst::", fn, ": members ", start, ", ", start, " + ", stride, ", ... up to ", last,
               " leave the parent team of ", p.size, " PEs");
  return make(p.world_pe(start), p.stride * stride, size, my_pe_, p.my_index >= 0);
}

std::pair<TeamShape, TeamShape> TeamTable::split_2d(Team parent, int xrange, const char* fn) const {
  const TeamShape& p = shape(parent, fn);
  NVST_REQUIRE(xrange >= 1, "nvst::", fn, ": xrange ", xrange, " (need >= 1)");
  const int x = std::min(xrange, p.size);
  // A PE outside the parent takes row and column 0: it is in neither (make()
  // is told it is not in the parent), but its shapes stay well formed.
  const int me = p.my_index >= 0 ? p.my_index : 0;
  const int row = me / x, col = me % x;
  const int row_start = row * x;
  TeamShape xs = make(p.world_pe(row_start), p.stride, std::min(x, p.size - row_start), my_pe_, p.my_index >= 0);
  TeamShape ys = make(p.world_pe(col), p.stride * x, (p.size - col + x - 1) / x, my_pe_, p.my_index >= 0);
  return {xs, ys};
}

Team TeamTable::add(const TeamShape& s, const char* fn) {
  NVST_REQUIRE(count() < kMaxTeams, "nvst::", fn, ": at most ", kMaxTeams, " teams (teams live until finalize)");
  teams_.push_back(s);
  return static_cast<Team>(count() - 1);
}

}  // namespace nvst::detail
