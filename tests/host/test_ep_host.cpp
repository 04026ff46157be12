// The host half of the expert-parallel Buffer, which runs without a GPU:
// the handle's offsets from the count matrix, receive regions planned from
// the size hints, and a clear refusal on PEs without a GPU. The kernels are
// tested against a CPU reference on GPUs (tests/gpu/test_ep.cu).
#include <gtest/gtest.h>

#include "ep/kernels.hpp"
#include "nvst/ep.hpp"
#include "nvst/nvst.hpp"
#include "pe_harness.hpp"

using namespace nvst::test;
using nvst::ep::XType;

TEST(EpHost, HandleOffsetsFollowTheCountMatrix) {
  nvst::ep::DispatchHandle h;
  h.n_pes = 3;
  // count[src][dst]: tokens src sends to dst.
  h.count = {2, 0, 5,  //
             1, 4, 0,  //
             3, 3, 3};
  // Rows arrive at dst packed by source: PE 2's rows at PE 0 start after
  // PE 0's 2 and PE 1's 1.
  EXPECT_EQ(h.recv_offset(0, 0), 0);
  EXPECT_EQ(h.recv_offset(2, 0), 3);
  EXPECT_EQ(h.recv_offset(3, 0), 6);  // everything PE 0 receives
  EXPECT_EQ(h.recv_offset(3, 2), 8);
  // A source's combine buffer is packed by destination: PE 2's rows back
  // from PE 2 start after those from PEs 0 and 1 (3 + 3).
  EXPECT_EQ(h.send_offset(2, 2), 6);
  EXPECT_EQ(h.send_offset(0, 3), 7);  // everything PE 0 sends
  EXPECT_EQ(h.send_offset(1, 1), 1);
}

TEST(EpHost, RowsAcrossNodesCountTokensOncePerNode) {
  // 4 PEs as 2 nodes of 2: PE 0 sends 3 tokens to PE 2 and 4 to PE 3; 2 of
  // them go to both, so 5 distinct tokens cross to node 1 (node_count).
  nvst::ep::DispatchHandle h;
  h.n_pes = 4;
  h.pes_per_node = 2;
  h.count = {1, 1, 3, 4,  //
             0, 0, 0, 0,  //
             2, 0, 0, 0,  //
             1, 1, 0, 0};
  h.node_count = {2, 5,  //
                  0, 0,  //
                  2, 0,  //
                  1, 0};
  EXPECT_EQ(h.n_nodes(), 2);
  EXPECT_EQ(h.rows_to_other_nodes(0), 5);       // one per token and node (relays)
  EXPECT_EQ(h.rows_to_other_nodes_flat(0), 7);  // one per token and PE
  EXPECT_EQ(h.rows_to_other_nodes(2), 2);
  EXPECT_EQ(h.rows_to_other_nodes_flat(3), 2);  // 1 + 1 to node 0, one token each: 1 row with relays
  EXPECT_EQ(h.rows_to_other_nodes(3), 1);
  EXPECT_EQ(h.rows_to_other_nodes(1), 0);
}

TEST(EpHost, SizeHintsHoldTheRowsTheyAreAskedFor) {
  using nvst::ep::detail::CombineRegion;
  using nvst::ep::detail::DispatchRegion;
  for (XType t : {XType::kBF16, XType::kFP8})
    for (int hidden : {128, 2048, 7168})
      for (int topk : {1, 6, 8})
        for (int rows : {0, 1, 1000, 32768}) {
          const std::size_t bytes = nvst::ep::Buffer::nvl_size_hint(rows, hidden, topk, t) / 2;
          const DispatchRegion d = DispatchRegion::plan(bytes, hidden, topk, t);
          const CombineRegion c = CombineRegion::plan(bytes, hidden, topk);
          SCOPED_TRACE(testing::Message() << "rows " << rows << " hidden " << hidden << " top-" << topk);
          EXPECT_GE(d.capacity, rows);
          EXPECT_GE(c.capacity, rows);
          // Arrays in order, 16-byte aligned, the last one inside the region.
          const std::size_t cap = static_cast<std::size_t>(d.capacity);
          EXPECT_EQ(d.row_bytes, static_cast<std::size_t>(hidden) * (t == XType::kFP8 ? 1 : 2));
          EXPECT_LE(cap * d.row_bytes, d.scales);
          EXPECT_LE(d.scales, d.topk_idx);
          EXPECT_LE(d.topk_idx + cap * topk * 8, d.topk_weights);
          EXPECT_LE(d.topk_weights + cap * topk * 4, d.src_idx);
          EXPECT_LE(d.src_idx + cap * 4, bytes);
          for (std::size_t off : {d.scales, d.topk_idx, d.topk_weights, d.src_idx}) EXPECT_EQ(off % 16, 0u);
          EXPECT_LE(c.topk_weights + static_cast<std::size_t>(c.capacity) * topk * 4, bytes);
          // A relay region (rows crossing nodes) adds one position per PE of a node.
          for (int positions : {1, 4, 8}) {
            const std::size_t rbytes = bytes + static_cast<std::size_t>(rows) * positions * 4 + 16;
            const DispatchRegion r = DispatchRegion::plan(rbytes, hidden, topk, t, positions);
            EXPECT_GE(r.capacity, rows);
            EXPECT_EQ(r.positions, positions);
            EXPECT_LE(r.src_idx + static_cast<std::size_t>(r.capacity) * 4, r.dst_pos);
            EXPECT_EQ(r.dst_pos % 16, 0u);
            EXPECT_LE(r.dst_pos + static_cast<std::size_t>(r.capacity) * positions * 4, rbytes);
          }
        }
  // The low-latency hint grows with every dimension.
  const std::size_t base = nvst::ep::Buffer::low_latency_size_hint(128, 7168, 4, 256, 8);
  EXPECT_GT(nvst::ep::Buffer::low_latency_size_hint(256, 7168, 4, 256, 8), base);
  EXPECT_GT(nvst::ep::Buffer::low_latency_size_hint(128, 7168, 4, 256, 9), base);
  EXPECT_THROW(nvst::ep::Buffer::low_latency_size_hint(0, 7168, 4, 256, 8), nvst::Error);
  EXPECT_THROW(nvst::ep::Buffer::nvl_size_hint(-1, 7168, 8, XType::kBF16), nvst::Error);
}

// A low-latency record for another node: [src_info 16 B][scales][x]. The
// kernels copy x with 16-byte vectors and put the record up to the end of
// x, so x must start 16-byte aligned after every scale, and a slot must hold
// a bf16 row.
TEST(EpHost, FarRecordKeepsXAlignedAfterItsScales) {
  using namespace nvst::ep::detail;
  for (int hidden : {128, 256, 384, 1024, 2048, 7168}) {
    SCOPED_TRACE(testing::Message() << "hidden " << hidden);
    const std::size_t scales = static_cast<std::size_t>(hidden) / 128 * 4;
    EXPECT_EQ(ll_far_scales_at(), 16u);
    EXPECT_EQ(ll_far_x_at(hidden) % 16, 0u);
    EXPECT_GE(ll_far_x_at(hidden), ll_far_scales_at() + scales);
    EXPECT_LT(ll_far_x_at(hidden), ll_far_scales_at() + scales + 16);
    EXPECT_EQ(ll_far_record_bytes(hidden), ll_far_x_at(hidden) + static_cast<std::size_t>(hidden) * 2);
    EXPECT_EQ(ll_far_record_bytes(hidden) % 16, 0u);  // records in an array stay aligned
  }
}

TEST(EpHost, BufferNeedsInitAndGpus) {
  auto res = run_pes(2, [](int) {
    std::string msg = error_of([] { nvst::ep::Buffer b(1 << 20); });
    PE_EXPECT(contains(msg, "nvst::init"), msg);
    nvst::init();
    msg = error_of([] { nvst::ep::Buffer b(1 << 20); });
    PE_EXPECT(contains(msg, "no GPU"), msg);
    nvst::finalize();
    return 0;
  });
  for (const auto& r : res) EXPECT_EQ(r.code(), 0);
}
