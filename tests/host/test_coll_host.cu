// The collectives on host-memory PEs (what CI can run): the same CPU
// reference as tests/gpu/test_coll.cu, bit for bit, through the proxy and
// the fabric transport, with 3 PEs (not a power of two).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "coll_reference.cuh"
#include "nvst/coll.hpp"
#include "nvst/nvst.hpp"
#include "pe_harness.hpp"

using namespace nvst::test;

TEST(CollHost, AllReduceAndAllGatherMatchTheReferenceBitForBit) {
  auto res = run_pes(3, [](int me) {
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
  }, {{"NVST_SYMMETRIC_SIZE", "96M"}}, 240);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(res[r].code(), 0) << "rank " << r;
}

TEST(CollHost, ReduceScatterAndBroadcastMatchTheReference) {
  auto res = run_pes(3, [](int me) {
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
          std::vector<std::uint8_t> want(inputs[0].begin() + me * count * es, inputs[0].begin() + (me + 1) * count * es);
          for (int p = 1; p < n; ++p)
            for (std::size_t i = 0; i < count; ++i) combine(t, op, &want[i * es], &inputs[p][(me * count + i) * es]);
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
  }, {{"NVST_SYMMETRIC_SIZE", "96M"}}, 240);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(res[r].code(), 0) << "rank " << r;
}

TEST(CollHost, AllToAllAllToAllvAndReduceMatchTheReference) {
  auto res = run_pes(3, [](int me) {
    nvst::init();
    const int n = nvst::n_pes();
    std::uint64_t salt = 2000;
        // all_to_all: every dtype; the last size spans 2 chunks (f32).
    for (DType t : kAllDTypes)
      for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{4097}, std::size_t{3'000'001}}) {
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
    std::string msg = error_of([&] { nvst::coll::all_to_allv(nullptr, two, two, nullptr, two, two, DType::kI32, nullptr); });
    PE_EXPECT(contains(msg, "entries each"), msg);
    msg = error_of([&] { nvst::coll::reduce(nullptr, nullptr, 0, DType::kI32, RedOp::kSum, n, nullptr); });
    PE_EXPECT(contains(msg, "out of range"), msg);
    std::vector<std::size_t> sc(n, 0), rc(n, 0), displs(n, 0);
    if (me == 0) sc[1] = 3;
    if (me == 1) rc[0] = 4;
    std::vector<std::int32_t> src(3, 7), dst(4, 0);
    msg = error_of([&] { nvst::coll::all_to_allv(src.data(), sc, displs, dst.data(), rc, displs, DType::kI32, nullptr); });
    if (me == 1) PE_EXPECT(contains(msg, "sends 12 bytes to PE 1, which expects 16"), msg);
    else PE_EXPECT(msg.empty(), msg);
    nvst::finalize();
    return 0;
  }, {{"NVST_SYMMETRIC_SIZE", "96M"}}, 240);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(res[r].code(), 0) << "rank " << r;
}
