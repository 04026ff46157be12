// Teams as NVSHMEM has them (nvshmem_team_t): a team is a strided set of
// world PEs, start, start + stride, ..., start + (size - 1) x stride. World
// and node are made at init; split_strided and split_2d make more. This file
// is the bookkeeping only (pure, so host tests cover it without a job); the
// runtime (runtime.cpp) checks that every PE asked for the same split.
//
// Every PE holds every handle, in the same order, including the handles of
// teams it is not in (its index there is -1). NVSHMEM gives such a PE
// NVSHMEM_TEAM_INVALID instead; holding the handle lets a layer above (the
// collectives' symmetric workspace) make its per-team set-up a collective
// over the world, which is the only collective allocation there is.
#pragma once

#include <utility>
#include <vector>

#include "nvst/nvst.hpp"

namespace nvst::detail {

struct TeamShape {
  int start = 0;   // world PE of member 0
  int stride = 1;  // world PEs between members
  int size = 0;
  int my_index = -1;  // this PE's index in the team, -1 if not a member
  int world_pe(int team_pe) const { return start + team_pe * stride; }
};

class TeamTable {
 public:
  static constexpr int kMaxTeams = 128;

  // World: every PE; node: the `node_size` PEs from `node_first` (a
  // contiguous range: runtime.cpp's compute_node insists on that).
  TeamTable(int world, int my_pe, int node_first, int node_size);

  // The team's shape on this PE; throws naming `fn` for a handle that was
  // never made (or kInvalid).
  const TeamShape& shape(Team team, const char* fn) const;
  int count() const { return static_cast<int>(teams_.size()); }

  // Members start, start + stride, ... (size of them) of `parent`, counted
  // in the parent's numbering. Throws naming `fn` when the range leaves the
  // parent. Does not add it: see add().
  TeamShape split_strided(Team parent, int start, int stride, int size, const char* fn) const;
  // The parent's members as rows of `xrange`: {my row (x), my column (y)}.
  // Every member of the parent is in exactly one of each; a PE outside the
  // parent is in neither.
  std::pair<TeamShape, TeamShape> split_2d(Team parent, int xrange, const char* fn) const;
  Team add(const TeamShape& shape, const char* fn);

 private:
  int my_pe_;
  std::vector<TeamShape> teams_;
};

}  // namespace nvst::detail
