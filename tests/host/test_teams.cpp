// Teams: the pure bookkeeping (TeamTable) and the world-collective splits on
// a job of host-memory PEs, including logical nodes and refused splits.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "nvst/nvst.hpp"
#include "pe_harness.hpp"
#include "runtime/teams.hpp"

using namespace nvst::test;
using nvst::Team;
using nvst::detail::TeamShape;
using nvst::detail::TeamTable;

namespace {
std::set<int> members(const TeamShape& s) {
  std::set<int> m;
  for (int i = 0; i < s.size; ++i) m.insert(s.world_pe(i));
  return m;
}
}  // namespace

TEST(TeamTable, WorldNodeAndStridedSplits) {
  // PE 5 of 8, logical nodes of 4: node = {4..7}.
  TeamTable t(8, 5, 4, 4);
  EXPECT_EQ(t.shape(Team::kWorld, "t").my_index, 5);
  EXPECT_EQ(t.shape(Team::kNode, "t").my_index, 1);
  EXPECT_EQ(members(t.shape(Team::kNode, "t")), (std::set<int>{4, 5, 6, 7}));
  // Odd world PEs: 1, 3, 5, 7; PE 5 is member 2.
  TeamShape odd = t.split_strided(Team::kWorld, 1, 2, 4, "t");
  EXPECT_EQ(members(odd), (std::set<int>{1, 3, 5, 7}));
  EXPECT_EQ(odd.my_index, 2);
  const Team h = t.add(odd, "t");
  EXPECT_EQ(static_cast<int>(h), 2);
  // A split of that team in its own numbering: members 1 and 3 -> PEs 3, 7.
  TeamShape sub = t.split_strided(h, 1, 2, 2, "t");
  EXPECT_EQ(members(sub), (std::set<int>{3, 7}));
  EXPECT_EQ(sub.my_index, -1);
  // A split of the node team: its members 0 and 2 -> PEs 4 and 6 here.
  TeamShape node_even = t.split_strided(Team::kNode, 0, 2, 2, "t");
  EXPECT_EQ(members(node_even), (std::set<int>{4, 6}));
  EXPECT_EQ(node_even.my_index, -1);
}

TEST(TeamTable, Split2dCoversEveryPeOnceInEachDirection) {
  for (int world : {1, 4, 6, 7}) {
    for (int xrange : {1, 2, 3, 8}) {
      std::multiset<int> in_x, in_y;
      for (int me = 0; me < world; ++me) {
        TeamTable t(world, me, 0, world);
        auto [x, y] = t.split_2d(Team::kWorld, xrange, "t");
        ASSERT_GE(x.my_index, 0) << world << " " << xrange << " " << me;
        ASSERT_GE(y.my_index, 0);
        EXPECT_EQ(x.world_pe(x.my_index), me);
        EXPECT_EQ(y.world_pe(y.my_index), me);
        EXPECT_EQ(x.world_pe(0) / std::min(xrange, world), me / std::min(xrange, world)) << "x is my row";
        for (int i = 0; i < y.size; ++i)
          EXPECT_EQ(y.world_pe(i) % std::min(xrange, world), me % std::min(xrange, world));
        if (x.my_index == 0)
          for (int p : members(x)) in_x.insert(p);
        if (y.my_index == 0)
          for (int p : members(y)) in_y.insert(p);
      }
      for (int p = 0; p < world; ++p) {
        EXPECT_EQ(in_x.count(p), 1u) << "world " << world << " xrange " << xrange << " PE " << p;
        EXPECT_EQ(in_y.count(p), 1u) << "world " << world << " xrange " << xrange << " PE " << p;
      }
    }
  }
}

TEST(TeamTable, BadArgumentsAndHandlesAreRefused) {
  TeamTable t(4, 0, 0, 4);
  EXPECT_TRUE(contains(error_of([&] { t.split_strided(Team::kWorld, 2, 1, 3, "split"); }), "leave the parent"));
  EXPECT_TRUE(contains(error_of([&] { t.split_strided(Team::kWorld, 0, 0, 2, "split"); }), "stride >= 1"));
  EXPECT_TRUE(contains(error_of([&] { t.split_strided(Team::kWorld, -1, 1, 2, "split"); }), "start >= 0"));
  EXPECT_TRUE(contains(error_of([&] { t.split_2d(Team::kWorld, 0, "split"); }), "xrange 0"));
  EXPECT_TRUE(contains(error_of([&] { t.shape(static_cast<Team>(7), "f"); }), "never created"));
  EXPECT_TRUE(contains(error_of([&] { t.shape(Team::kInvalid, "f"); }), "kInvalid"));
}

// 4 host PEs as 2 logical nodes of 2: split_2d gives node and cross-node
// teams; a strided split of the node team; every PE agrees on handles.
TEST(Teams, SplitsAgreeOnEveryPeAndRefuseDifferingCalls) {
  auto res = run_pes(
      4,
      [](int me) {
        nvst::init();
        auto [x, y] = nvst::team_split_2d(Team::kWorld, 2);
        PE_EXPECT(static_cast<int>(x) == 2 && static_cast<int>(y) == 3, "handles ", static_cast<int>(x), " ",
                  static_cast<int>(y));
        PE_EXPECT(nvst::team_n_pes(x) == 2 && nvst::team_my_pe(x) == me % 2, "x team: index ", nvst::team_my_pe(x));
        PE_EXPECT(nvst::team_translate_pe(x, 0) == nvst::team_translate_pe(Team::kNode, 0), "x is the node");
        PE_EXPECT(nvst::team_n_pes(y) == 2 && nvst::team_my_pe(y) == me / 2, "y team: index ", nvst::team_my_pe(y));
        PE_EXPECT(nvst::team_translate_pe(y, 1) == 2 + me % 2, "y member 1 is ", nvst::team_translate_pe(y, 1));
        const Team first = nvst::team_split_strided(Team::kNode, 0, 1, 1);  // PE 0 of each node
        PE_EXPECT(nvst::team_my_pe(first) == (me % 2 == 0 ? 0 : -1), "node leaders: ", nvst::team_my_pe(first));
        // A PE passing other arguments: every PE fails, naming it.
        std::string msg = error_of([&] { nvst::team_split_strided(Team::kWorld, 0, me == 3 ? 2 : 1, 2); });
        PE_EXPECT(contains(msg, "PE ") && contains(msg, "different call"), msg);
        // A range leaving the parent on every PE: refused everywhere, no hang.
        msg = error_of([&] { nvst::team_split_strided(Team::kWorld, 1, 2, 3); });
        PE_EXPECT(contains(msg, "failed on PE 0") && contains(msg, "leave the parent"), msg);
        // Failed calls made no team: the next split gets the next handle.
        const Team odd = nvst::team_split_strided(Team::kWorld, 1, 2, 2);
        PE_EXPECT(static_cast<int>(odd) == 5 && nvst::team_my_pe(odd) == (me % 2 ? me / 2 : -1), "odd team");
        nvst::finalize();
        return 0;
      },
      {{"NVST_NODE_SIZE", "2"}});
  for (int r = 0; r < 4; ++r) EXPECT_EQ(res[r].code(), 0) << "rank " << r;
}
