// The collectives on host-memory PEs (what CI can run): the same CPU
// reference as tests/gpu/test_coll.cu, bit for bit, through the proxy and
// the fabric transport, with 3 PEs (not a power of two).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "coll_reference.cuh"
#include "nvst/coll.hpp"
#include "nvst/nvst.hpp"
#include "pe_harness.hpp"

using namespace nvst::test;
using nvst::Team;
using nvst::coll::Algo;

TEST(CollHost, AllReduceAndAllGatherMatchTheReferenceBitForBit) {
  auto res = run_pes(
      3,
      [](int me) {
        nvst::init();
        const int n = nvst::n_pes();
        nvst::coll::prepare();
        const std::size_t sizes[] = {0, 1, 7, 1000, 4097, 65536 + 3, 3'000'001};  // the last spans 3 chunks
        std::uint64_t salt = 0;
        long long bad_total = 0;
        for (DType t : kAllDTypes)
          for (RedOp op : kAllOps)
            for (std::size_t count : sizes) {
              if (t != DType::kF32 && count > 100000) continue;  // one large case is enough
              const std::size_t es = nvst::coll::dtype_size(t);
              ++salt;
              std::vector<std::vector<std::uint8_t>> inputs;
              for (int p = 0; p < n; ++p) inputs.push_back(make_input(t, count, p, salt, 7));
              std::vector<std::uint8_t> want = reduce_expected(t, op, inputs);
              std::vector<std::uint8_t> out(count * es + 16, 0xA5);
              const bool in_place = salt % 2 == 0;
              std::vector<std::uint8_t> in = inputs[me];
              nvst::coll::all_reduce(in.data(), in_place ? in.data() : out.data(), count, t, op, nullptr);
              const std::uint8_t* got = in_place ? in.data() : out.data();
              long long bad = 0;
              for (std::size_t i = 0; i < count * es; ++i) bad += got[i] != want[i];
              if (!in_place)
                for (std::size_t i = count * es; i < out.size(); ++i) bad += out[i] != 0xA5;
              PE_EXPECT(bad == 0, nvst::coll::dtype_name(t), " ", nvst::coll::redop_name(op), " count ", count,
                        in_place ? " in place" : "", ": ", bad, " bytes wrong");
              bad_total += bad;
            }
        for (std::size_t count : sizes) {
          ++salt;
          std::vector<std::vector<std::uint8_t>> inputs;
          for (int p = 0; p < n; ++p) inputs.push_back(make_input(DType::kBF16, count, p, salt, 7));
          std::vector<std::uint8_t> out(count * 2 * n + 16, 0xA5);
          nvst::coll::all_gather(inputs[me].data(), out.data(), count, DType::kBF16, nullptr);
          long long bad = 0;
          for (int p = 0; p < n; ++p)
            for (std::size_t i = 0; i < count * 2; ++i) bad += out[p * count * 2 + i] != inputs[p][i];
          for (std::size_t i = count * 2 * n; i < out.size(); ++i) bad += out[i] != 0xA5;
          PE_EXPECT(bad == 0, "all_gather count ", count, ": ", bad, " bytes wrong");
        }
        nvst::finalize();
        return bad_total == 0 ? 0 : 1;
      },
      {{"NVST_SYMMETRIC_SIZE", "96M"}}, 240);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(res[r].code(), 0) << "rank " << r;
}

TEST(CollHost, ReduceScatterAndBroadcastMatchTheReference) {
  auto res = run_pes(
      3,
      [](int me) {
        nvst::init();
        const int n = nvst::n_pes();
        const std::size_t sizes[] = {0, 1, 7, 4097, 65536 + 3, 2'000'003};  // the last spans 2 chunks (f32)
        std::uint64_t salt = 1000;
        for (DType t : kAllDTypes)
          for (RedOp op : kAllOps)
            for (std::size_t count : sizes) {
              if (t != DType::kF32 && count > 100000) continue;
              const std::size_t es = nvst::coll::dtype_size(t);
              ++salt;
              // PE p's input: n parts of `count` elements.
              std::vector<std::vector<std::uint8_t>> inputs;
              for (int p = 0; p < n; ++p) inputs.push_back(make_input(t, count * n, p, salt, 11));
              std::vector<std::uint8_t> want(inputs[0].begin() + me * count * es,
                                             inputs[0].begin() + (me + 1) * count * es);
              for (int p = 1; p < n; ++p)
                for (std::size_t i = 0; i < count; ++i)
                  combine(t, op, &want[i * es], &inputs[p][(me * count + i) * es]);
              std::vector<std::uint8_t> out(count * es + 16, 0xA5);
              nvst::coll::reduce_scatter(inputs[me].data(), out.data(), count, t, op, nullptr);
              long long bad = 0;
              for (std::size_t i = 0; i < count * es; ++i) bad += out[i] != want[i];
              for (std::size_t i = count * es; i < out.size(); ++i) bad += out[i] != 0xA5;
              PE_EXPECT(bad == 0, "reduce_scatter ", nvst::coll::dtype_name(t), " ", nvst::coll::redop_name(op),
                        " count ", count, ": ", bad, " bytes wrong");
            }
        for (int root : {0, n - 1})
          for (std::size_t count : sizes) {
            ++salt;
            auto src = make_input(DType::kI32, count, root, salt, 11);
            std::vector<std::uint8_t> out(count * 4 + 16, 0xA5);
            nvst::coll::broadcast(me == root ? src.data() : nullptr, out.data(), count, DType::kI32, root, nullptr);
            long long bad = 0;
            for (std::size_t i = 0; i < count * 4; ++i) bad += out[i] != src[i];
            for (std::size_t i = count * 4; i < out.size(); ++i) bad += out[i] != 0xA5;
            PE_EXPECT(bad == 0, "broadcast root ", root, " count ", count, ": ", bad, " bytes wrong");
          }
        std::string msg = error_of([&] { nvst::coll::broadcast(nullptr, nullptr, 0, DType::kI32, 5, nullptr); });
        PE_EXPECT(contains(msg, "root 5 out of range"), msg);
        nvst::finalize();
        return 0;
      },
      {{"NVST_SYMMETRIC_SIZE", "96M"}}, 240);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(res[r].code(), 0) << "rank " << r;
}

TEST(CollHost, AllToAllAllToAllvAndReduceMatchTheReference) {
  auto res = run_pes(
      3,
      [](int me) {
        nvst::init();
        const int n = nvst::n_pes();
        std::uint64_t salt = 2000;
        // all_to_all: every dtype; the last size spans 2 chunks (f32).
        for (DType t : kAllDTypes)
          for (std::size_t count :
               {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{4097}, std::size_t{3'000'001}}) {
            if (t != DType::kF32 && count > 100000) continue;
            const std::size_t es = nvst::coll::dtype_size(t);
            ++salt;
            std::vector<std::vector<std::uint8_t>> inputs;
            for (int p = 0; p < n; ++p) inputs.push_back(make_input(t, count * n, p, salt, 13));
            auto want = a2a_expected(me, inputs, count * es);
            std::vector<std::uint8_t> out(count * es * n + 16, 0xA5);
            nvst::coll::all_to_all(inputs[me].data(), out.data(), count, t, nullptr);
            long long bad = 0;
            for (std::size_t i = 0; i < want.size(); ++i) bad += out[i] != want[i];
            for (std::size_t i = want.size(); i < out.size(); ++i) bad += out[i] != 0xA5;
            PE_EXPECT(bad == 0, "all_to_all ", nvst::coll::dtype_name(t), " count ", count, ": ", bad, " bytes wrong");
          }
        // all_to_allv: random counts (zeros too) and displacements with gaps;
        // the last layout sends one message of 3 slots (rounds with acks).
        for (DType t : kAllDTypes)
          for (std::size_t big : {std::size_t{0}, std::size_t{1}, std::size_t{3'000'001}}) {
            if (t != DType::kF32 && big > 1) continue;
            const std::size_t es = nvst::coll::dtype_size(t);
            ++salt;
            const VLayout l = make_v_layout(n, salt, big == 1 ? 5000 : 40, big > 1 ? big : 0);
            std::vector<std::vector<std::uint8_t>> inputs;
            for (int p = 0; p < n; ++p) inputs.push_back(make_input(t, l.in_len[p], p, salt, 13));
            auto want = v_expected(l, me, inputs, es);
            std::vector<std::uint8_t> out(want.size(), 0xA5);
            auto rc = l.recv_counts(me);
            nvst::coll::all_to_allv(inputs[me].data(), l.counts[me], l.send_displs[me], out.data(), rc,
                                    l.recv_displs[me], t, nullptr);
            long long bad = 0;
            for (std::size_t i = 0; i < want.size(); ++i) bad += out[i] != want[i];
            PE_EXPECT(bad == 0, "all_to_allv ", nvst::coll::dtype_name(t), " layout ", salt, ": ", bad, " bytes wrong");
          }
        // reduce: every dtype x op, first and last root; off the root out is untouched.
        for (int root : {0, n - 1})
          for (DType t : kAllDTypes)
            for (RedOp op : kAllOps)
              for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{4097}, std::size_t{3'000'001}}) {
                if ((t != DType::kF32 || op != RedOp::kSum) && count > 100000) continue;
                const std::size_t es = nvst::coll::dtype_size(t);
                ++salt;
                std::vector<std::vector<std::uint8_t>> inputs;
                for (int p = 0; p < n; ++p) inputs.push_back(make_input(t, count, p, salt, 13));
                std::vector<std::uint8_t> want = reduce_expected(t, op, inputs);
                if (me != root) want.assign(count * es, 0xA5);
                std::vector<std::uint8_t> out(count * es + 16, 0xA5);
                nvst::coll::reduce(inputs[me].data(), out.data(), count, t, op, root, nullptr);
                long long bad = 0;
                for (std::size_t i = 0; i < count * es; ++i) bad += out[i] != want[i];
                for (std::size_t i = count * es; i < out.size(); ++i) bad += out[i] != 0xA5;
                PE_EXPECT(bad == 0, "reduce root ", root, " ", nvst::coll::dtype_name(t), " ",
                          nvst::coll::redop_name(op), " count ", count, ": ", bad, " bytes wrong");
              }
        // Refusals: wrong lengths, and a receive count that disagrees with the
        // sender's (PE 1 expects one element more from PE 0: it stops with a
        // message, the others finish).
        std::vector<std::size_t> two(2, 0), zeros(n, 0);
        std::string msg =
            error_of([&] { nvst::coll::all_to_allv(nullptr, two, two, nullptr, two, two, DType::kI32, nullptr); });
        PE_EXPECT(contains(msg, "entries each"), msg);
        msg = error_of([&] { nvst::coll::reduce(nullptr, nullptr, 0, DType::kI32, RedOp::kSum, n, nullptr); });
        PE_EXPECT(contains(msg, "out of range"), msg);
        std::vector<std::size_t> sc(n, 0), rc(n, 0), displs(n, 0);
        if (me == 0) sc[1] = 3;
        if (me == 1) rc[0] = 4;
        std::vector<std::int32_t> src(3, 7), dst(4, 0);
        msg = error_of(
            [&] { nvst::coll::all_to_allv(src.data(), sc, displs, dst.data(), rc, displs, DType::kI32, nullptr); });
        if (me == 1)
          PE_EXPECT(contains(msg, "sends 12 bytes to PE 1, which expects 16"), msg);
        else
          PE_EXPECT(msg.empty(), msg);
        nvst::finalize();
        return 0;
      },
      {{"NVST_SYMMETRIC_SIZE", "96M"}}, 240);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(res[r].code(), 0) << "rank " << r;
}

// Teams: 4 PEs as 2 logical nodes of 2. split_2d gives each PE its node (x)
// and its cross-node pair (y); every collective runs on both, with the
// team's numbering (roots, parts), against the reference over the team's
// members only. all_reduce on x then y is the hierarchical all_reduce, and
// equals the reference reduced in that order. A 1 MiB workspace makes the
// larger sizes take several chunks.
TEST(CollHost, TeamCollectivesAndTheirComposition) {
  auto res = run_pes(
      4,
      [](int me) {
        nvst::init();
        auto [x, y] = nvst::team_split_2d(Team::kWorld, 2);
        // Before prepare: refused with what to do.
        std::int32_t one = 1;
        std::string msg =
            error_of([&] { nvst::coll::all_reduce(&one, &one, 1, DType::kI32, RedOp::kSum, nullptr, Algo::kAuto, x); });
        PE_EXPECT(contains(msg, "prepare(team)"), msg);
        // A team this PE is not in: refused (prepare is still every PE's call).
        const Team pe0 = nvst::team_split_strided(Team::kWorld, 0, 1, 1);
        for (Team t : {x, y, pe0}) nvst::coll::prepare(t);
        msg = error_of([&] { nvst::coll::barrier(nullptr, pe0); });
        PE_EXPECT(me == 0 ? msg.empty() : contains(msg, "not a member of team 4"), msg);
        std::uint64_t salt = 5000;
        long long bad_total = 0;
        auto members = [](Team t) {
          std::vector<int> w;
          for (int i = 0; i < nvst::team_n_pes(t); ++i) w.push_back(nvst::team_translate_pe(t, i));
          return w;
        };
        auto check = [&](const std::vector<std::uint8_t>& got, const std::vector<std::uint8_t>& want,
                         std::size_t poison_from, const std::string& what) {
          long long bad = 0;
          for (std::size_t i = 0; i < want.size(); ++i) bad += got[i] != want[i];
          for (std::size_t i = poison_from; i < got.size(); ++i) bad += got[i] != 0xA5;
          if (bad) std::fprintf(stderr, "PE %d: %s: %lld bytes wrong\n", me, what.c_str(), bad);
          bad_total += bad;
        };
        for (Team team : {x, y}) {
          const std::vector<int> w = members(team);
          const int n = static_cast<int>(w.size()), ti = nvst::team_my_pe(team);
          const std::string tn = team == x ? "x team" : "y team";
          for (DType t : kAllDTypes)
            for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{4097}, std::size_t{300'001}}) {
              if (t != DType::kF32 && count > 100000) continue;
              const std::size_t es = nvst::coll::dtype_size(t);
              std::vector<std::vector<std::uint8_t>> in, parts;
              ++salt;
              for (int p : w) in.push_back(make_input(t, count, p, salt, 7));
              for (int p : w) parts.push_back(make_input(t, count * n, p, salt, 9));
              const std::string what = tn + " " + nvst::coll::dtype_name(t) + " count " + std::to_string(count);
              std::vector<std::uint8_t> out(count * es * n + 16, 0xA5);
              nvst::coll::all_reduce(in[ti].data(), out.data(), count, t, RedOp::kSum, nullptr, Algo::kAuto, team);
              check(out, reduce_expected(t, RedOp::kSum, in), count * es, "all_reduce " + what);
              out.assign(out.size(), 0xA5);
              nvst::coll::all_gather(in[ti].data(), out.data(), count, t, nullptr, team);
              std::vector<std::uint8_t> gathered;
              for (auto& v : in) gathered.insert(gathered.end(), v.begin(), v.end());
              check(out, gathered, count * es * n, "all_gather " + what);
              out.assign(out.size(), 0xA5);
              nvst::coll::reduce_scatter(parts[ti].data(), out.data(), count, t, RedOp::kMax, nullptr, team);
              std::vector<std::vector<std::uint8_t>> mine;
              for (auto& v : parts) mine.emplace_back(v.begin() + ti * count * es, v.begin() + (ti + 1) * count * es);
              check(out, reduce_expected(t, RedOp::kMax, mine), count * es, "reduce_scatter " + what);
              out.assign(out.size(), 0xA5);
              nvst::coll::all_to_all(parts[ti].data(), out.data(), count, t, nullptr, team);
              check(out, a2a_expected(ti, parts, count * es), count * es * n, "all_to_all " + what);
              out.assign(out.size(), 0xA5);
              nvst::coll::broadcast(in[ti].data(), out.data(), count, t, 1, nullptr, team);
              check(out, in[1], count * es, "broadcast from member 1 " + what);
              out.assign(out.size(), 0xA5);
              nvst::coll::reduce(in[ti].data(), out.data(), count, t, RedOp::kMin, 0, nullptr, team);
              check(out, ti == 0 ? reduce_expected(t, RedOp::kMin, in) : std::vector<std::uint8_t>(count * es, 0xA5),
                    count * es, "reduce to member 0 " + what);
            }
          // all_to_allv with the team's numbering (2 entries), one message of 3 slots.
          ++salt;
          const VLayout l = make_v_layout(n, salt, 5000, 300'001);
          std::vector<std::vector<std::uint8_t>> in;
          for (int p = 0; p < n; ++p) in.push_back(make_input(DType::kF32, l.in_len[p], w[p], salt, 13));
          auto want = v_expected(l, ti, in, 4);
          std::vector<std::uint8_t> out(want.size(), 0xA5);
          nvst::coll::all_to_allv(in[ti].data(), l.counts[ti], l.send_displs[ti], out.data(), l.recv_counts(ti),
                                  l.recv_displs[ti], DType::kF32, nullptr, team);
          check(out, want, want.size(), "all_to_allv " + tn);
          std::vector<std::size_t> world_sized(4, 0);
          msg = error_of([&] {
            nvst::coll::all_to_allv(nullptr, world_sized, world_sized, nullptr, world_sized, world_sized, DType::kI32,
                                    nullptr, team);
          });
          PE_EXPECT(contains(msg, "need 2 entries"), msg);
          msg = error_of([&] { nvst::coll::broadcast(&one, &one, 1, DType::kI32, 2, nullptr, team); });
          PE_EXPECT(contains(msg, "root 2 out of range [0, 2)"), msg);
        }
        // Hierarchical all_reduce: inside the node (x), then across nodes (y).
        for (DType t : kAllDTypes) {
          const std::size_t count = 70'001, es = nvst::coll::dtype_size(t);
          ++salt;
          std::vector<std::vector<std::uint8_t>> in;
          for (int p = 0; p < 4; ++p) in.push_back(make_input(t, count, p, salt, 7));
          std::vector<std::uint8_t> buf = in[me];
          nvst::coll::all_reduce(buf.data(), buf.data(), count, t, RedOp::kSum, nullptr, Algo::kAuto, x);
          nvst::coll::all_reduce(buf.data(), buf.data(), count, t, RedOp::kSum, nullptr, Algo::kAuto, y);
          const auto want = reduce_expected(
              t, RedOp::kSum,
              {reduce_expected(t, RedOp::kSum, {in[0], in[1]}), reduce_expected(t, RedOp::kSum, {in[2], in[3]})});
          check(buf, want, buf.size(), std::string("x then y all_reduce ") + nvst::coll::dtype_name(t));
          (void)es;
        }
        // barrier(team): a put issued before it (no quiet) is in place after it.
        auto* slot = static_cast<std::uint64_t*>(nvst::calloc(1, 8));
        const int partner = nvst::team_translate_pe(y, 1 - nvst::team_my_pe(y));
        const std::uint64_t v = 0xB0A7000000ull + static_cast<std::uint64_t>(me);
        nvst::putmem_nbi(slot, &v, 8, partner);
        nvst::coll::barrier(nullptr, y);
        PE_EXPECT(*slot == 0xB0A7000000ull + static_cast<std::uint64_t>(partner), "after barrier(y): ", std::hex,
                  *slot);
        nvst::free(slot);
        nvst::finalize();
        PE_EXPECT(bad_total == 0, bad_total, " bytes wrong in all");
        return 0;
      },
      {{"NVST_SYMMETRIC_SIZE", "32M"}, {"NVST_NODE_SIZE", "2"}, {"NVST_COLL_WORKSPACE", "1M"}}, 240);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(res[r].code(), 0) << "rank " << r;
}

// The ring all_reduce on 3 and 4 host PEs: bit for bit the ring-order
// reference (each segment reduced from its owner on), for every dtype x op,
// odd sizes, 0 and 1 element, in place and out of place, and a size that
// takes several launches' slices (1 MiB workspace). The PE-order reference
// must fail on float sums (the test can tell the orders apart), and
// NVST_COLL_ALGO=ring picks it.
void ring_case(int npes) {
  auto res = run_pes(
      npes,
      [](int me) {
        nvst::init();
        const int n = nvst::n_pes();
        std::uint64_t salt = 7000;
        long long bad_total = 0, flat_differs = 0;
        for (DType t : kAllDTypes)
          for (RedOp op : kAllOps)
            for (std::size_t count :
                 {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{4097}, std::size_t{300'001}}) {
              if ((t != DType::kF32 || op != RedOp::kSum) && count > 5000) continue;
              const std::size_t es = nvst::coll::dtype_size(t);
              ++salt;
              std::vector<std::vector<std::uint8_t>> in;
              for (int p = 0; p < n; ++p) in.push_back(make_input(t, count, p, salt, 13));
              const auto want = ring_reduce_expected(t, op, in);
              const bool in_place = salt % 2 == 1;
              std::vector<std::uint8_t> buf = in[me], out(count * es + 16, 0xA5);
              nvst::coll::all_reduce(buf.data(), in_place ? buf.data() : out.data(), count, t, op, nullptr,
                                     Algo::kRing);
              const std::uint8_t* got = in_place ? buf.data() : out.data();
              long long bad = 0;
              for (std::size_t i = 0; i < count * es; ++i) bad += got[i] != want[i];
              if (!in_place)
                for (std::size_t i = count * es; i < out.size(); ++i) bad += out[i] != 0xA5;
              if (t == DType::kF32 && op == RedOp::kSum) {
                const auto flat = reduce_expected(t, op, in);
                for (std::size_t i = 0; i < count * es; ++i) flat_differs += got[i] != flat[i];
              }
              PE_EXPECT(bad == 0, "ring ", nvst::coll::dtype_name(t), " ", nvst::coll::redop_name(op), " count ", count,
                        in_place ? " in place" : "", ": ", bad, " bytes wrong");
              bad_total += bad;
            }
        PE_EXPECT(flat_differs > 0, "ring and PE order agree everywhere: the test cannot tell them apart");
        // NVST_COLL_ALGO=ring (set for this process below) picks it under auto.
        std::vector<std::vector<std::uint8_t>> in;
        for (int p = 0; p < n; ++p) in.push_back(make_input(DType::kF32, 9999, p, 99, 13));
        std::vector<std::uint8_t> out(9999 * 4);
        nvst::coll::all_reduce(in[me].data(), out.data(), 9999, DType::kF32, RedOp::kSum, nullptr);
        PE_EXPECT(out == ring_reduce_expected(DType::kF32, RedOp::kSum, in),
                  "NVST_COLL_ALGO=ring did not run the ring");
        nvst::finalize();
        return bad_total == 0 ? 0 : 1;
      },
      {{"NVST_SYMMETRIC_SIZE", "32M"}, {"NVST_COLL_WORKSPACE", "1M"}, {"NVST_COLL_ALGO", "ring"}}, 240);
  for (int r = 0; r < npes; ++r) EXPECT_EQ(res[r].code(), 0) << "rank " << r;
}

TEST(CollHost, RingAllReduceMatchesTheRingOrderReferenceOn3Pes) { ring_case(3); }
TEST(CollHost, RingAllReduceMatchesTheRingOrderReferenceOn4Pes) { ring_case(4); }

// NVST_COLL_ALGO=hierarchical all_gather and reduce_scatter on 6 PEs as 2
// logical nodes of 3 (so the transposes between node-major and column
// order are not square): all_gather equals the flat result byte for byte;
// reduce_scatter equals each node's sum (in node order) reduced across the
// nodes, for every dtype, sum/max/prod, 0, 1, 7 and 4097 elements; nothing
// past the output is written. A team other than the world runs the flat
// form (a node's reduce_scatter is its PE-order sum).
TEST(CollHost, HierarchicalAllGatherAndReduceScatterMatchTheReference) {
  auto res = run_pes(
      6,
      [](int me) {
        nvst::init();
        const int n = nvst::n_pes(), G = nvst::team_n_pes(Team::kNode);
        std::uint64_t salt = 9500;
        long long bad_total = 0;
        for (DType t : kAllDTypes)
          for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{4097}}) {
            const std::size_t es = nvst::coll::dtype_size(t), cb = count * es;
            ++salt;
            std::vector<std::vector<std::uint8_t>> parts;  // every PE's input, n parts each
            for (int p = 0; p < n; ++p) parts.push_back(make_input(t, count * n, p, salt, 13));
            std::vector<std::uint8_t> out(cb * n + 16, 0xA5);
            nvst::coll::all_gather(parts[me].data(), out.data(), count, t, nullptr);  // each PE's first part
            long long bad = 0;
            for (int p = 0; p < n; ++p)
              for (std::size_t i = 0; i < cb; ++i) bad += out[p * cb + i] != parts[p][i];
            for (std::size_t i = cb * n; i < out.size(); ++i) bad += out[i] != 0xA5;
            for (RedOp op : {RedOp::kSum, RedOp::kMax, RedOp::kProd}) {
              std::vector<std::vector<std::uint8_t>> node_sums;
              for (int node = 0; node < n / G; ++node) {
                std::vector<std::vector<std::uint8_t>> mine;  // part `me` of the node's PEs
                for (int p = node * G; p < (node + 1) * G; ++p)
                  mine.emplace_back(parts[p].begin() + me * cb, parts[p].begin() + (me + 1) * cb);
                node_sums.push_back(reduce_expected(t, op, mine));
              }
              const auto want = reduce_expected(t, op, node_sums);
              std::vector<std::uint8_t> got(cb + 16, 0xA5);
              nvst::coll::reduce_scatter(parts[me].data(), got.data(), count, t, op, nullptr);
              for (std::size_t i = 0; i < got.size(); ++i) bad += got[i] != (i < cb ? want[i] : 0xA5);
              if (t == DType::kF32 && op == RedOp::kSum && count == 4097) {  // the hierarchical order was used:
                std::vector<std::vector<std::uint8_t>> all;                  // the flat (PE-order) sum differs
                for (int p = 0; p < n; ++p)
                  all.emplace_back(parts[p].begin() + me * cb, parts[p].begin() + (me + 1) * cb);
                const auto flat = reduce_expected(t, op, all);
                PE_EXPECT(!std::equal(flat.begin(), flat.end(), got.begin()), "reduce_scatter took the flat path");
                bad += std::equal(flat.begin(), flat.end(), got.begin());
              }
            }
            PE_EXPECT(bad == 0, "hierarchical all_gather/reduce_scatter ", nvst::coll::dtype_name(t), " count ", count,
                      ": ", bad, " bytes wrong");
            bad_total += bad;
          }
        {  // the node team: the flat form
          nvst::coll::prepare(Team::kNode);
          const int g = nvst::team_my_pe(Team::kNode), first = nvst::team_translate_pe(Team::kNode, 0);
          const std::size_t count = 33;
          std::vector<std::vector<std::uint8_t>> mine;
          std::vector<std::uint8_t> in;
          for (int p = 0; p < G; ++p) {
            auto whole = make_input(DType::kF32, count * G, first + p, ++salt, 13);
            if (first + p == me) in = whole;
            mine.emplace_back(whole.begin() + g * count * 4, whole.begin() + (g + 1) * count * 4);
          }
          const auto want = reduce_expected(DType::kF32, RedOp::kSum, mine);
          std::vector<std::uint8_t> got(count * 4);
          nvst::coll::reduce_scatter(in.data(), got.data(), count, DType::kF32, RedOp::kSum, nullptr, Team::kNode);
          PE_EXPECT(got == want, "reduce_scatter on the node team");
          bad_total += got != want;
        }
        nvst::finalize();
        return bad_total == 0 ? 0 : 1;
      },
      {{"NVST_SYMMETRIC_SIZE", "32M"},
       {"NVST_NODE_SIZE", "3"},
       {"NVST_COLL_WORKSPACE", "1M"},
       {"NVST_COLL_ALGO", "hierarchical"}},
      240);
  for (int r = 0; r < 6; ++r) EXPECT_EQ(res[r].code(), 0) << "rank " << r;
}

// Nodes of different sizes (3 PEs as nodes of 2 and 1): every PE refuses a
// hierarchical all_gather and reduce_scatter with the same message, the PE
// alone on its node too (it once took the flat form while the others
// waited in the hierarchical one).
TEST(CollHost, HierarchicalOnUnevenNodesIsRefusedEverywhere) {
  auto res = run_pes(
      3,
      [](int me) {
        nvst::init();
        std::vector<float> in(3 * 4, 1.0f), out(3 * 4);
        int refused = 0;
        for (int call = 0; call < 2; ++call) {
          const std::string msg = error_of([&] {
            if (call == 0)
              nvst::coll::all_gather(in.data(), out.data(), 4, DType::kF32, nullptr);
            else
              nvst::coll::reduce_scatter(in.data(), out.data(), 4, DType::kF32, RedOp::kSum, nullptr);
          });
          PE_EXPECT(contains(msg, "nodes of different sizes"), "PE ", me, " call ", call, ": '", msg, "'");
          refused += contains(msg, "nodes of different sizes");
        }
        nvst::finalize();
        return refused == 2 ? 0 : 1;
      },
      {{"NVST_SYMMETRIC_SIZE", "32M"},
       {"NVST_NODE_SIZE", "2"},
       {"NVST_COLL_WORKSPACE", "1M"},
       {"NVST_COLL_ALGO", "hierarchical"}},
      120);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(res[r].code(), 0) << "rank " << r;
}

// The hierarchical all_reduce (reduce_scatter in the node, all_reduce of a
// part across nodes, all_gather in the node) on 4 PEs as 2 logical nodes of
// 2: equal, bit for bit, to each node's sum (in node order) reduced across
// the nodes in order, for counts the node size does not divide (padded),
// 0 and 1 element, in place and out of place; on another team it is refused.
TEST(CollHost, HierarchicalAllReduceIsNodeSumsReducedAcrossNodes) {
  auto res = run_pes(
      4,
      [](int me) {
        nvst::init();
        std::uint64_t salt = 9000;
        long long bad_total = 0;
        for (DType t : kAllDTypes)
          for (RedOp op : {RedOp::kSum, RedOp::kMax, RedOp::kProd})
            for (std::size_t count :
                 {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{4097}, std::size_t{300'000}}) {
              if (t != DType::kF32 && count > 100000) continue;
              const std::size_t es = nvst::coll::dtype_size(t);
              ++salt;
              std::vector<std::vector<std::uint8_t>> in;
              for (int p = 0; p < 4; ++p) in.push_back(make_input(t, count, p, salt, 11));
              const auto want = reduce_expected(
                  t, op, {reduce_expected(t, op, {in[0], in[1]}), reduce_expected(t, op, {in[2], in[3]})});
              const bool in_place = salt % 2 == 1;
              std::vector<std::uint8_t> buf = in[me], out(count * es + 16, 0xA5);
              nvst::coll::all_reduce(buf.data(), in_place ? buf.data() : out.data(), count, t, op, nullptr,
                                     Algo::kHierarchical);
              const std::uint8_t* got = in_place ? buf.data() : out.data();
              long long bad = 0;
              for (std::size_t i = 0; i < count * es; ++i) bad += got[i] != want[i];
              if (!in_place)
                for (std::size_t i = count * es; i < out.size(); ++i) bad += out[i] != 0xA5;
              PE_EXPECT(bad == 0, "hierarchical ", nvst::coll::dtype_name(t), " ", nvst::coll::redop_name(op),
                        " count ", count, in_place ? " in place" : "", ": ", bad, " bytes wrong");
              bad_total += bad;
            }
        auto [x, y] = nvst::team_split_2d(Team::kWorld, 2);
        nvst::coll::prepare(x);
        std::int32_t one = 1;
        std::string msg = error_of(
            [&] { nvst::coll::all_reduce(&one, &one, 1, DType::kI32, RedOp::kSum, nullptr, Algo::kHierarchical, x); });
        PE_EXPECT(contains(msg, "hierarchical runs on the world team"), msg);
        nvst::finalize();
        return bad_total == 0 ? 0 : 1;
      },
      {{"NVST_SYMMETRIC_SIZE", "32M"}, {"NVST_NODE_SIZE", "2"}, {"NVST_COLL_WORKSPACE", "1M"}}, 240);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(res[r].code(), 0) << "rank " << r;
}
