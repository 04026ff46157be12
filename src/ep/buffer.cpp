// nvst::ep::Buffer, host side: symmetric regions, the count exchange of a
// first dispatch, argument checks, and the launches (kernels in
// normal_mode.cu and low_latency.cu).
#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>

#include "ep/handle_memory.hpp"
#include "ep/kernels.hpp"
#include "ep/logfmt.hpp"
#include "nvst/ep.hpp"
#include "nvst/error.hpp"
#include "nvst/nvst.hpp"

namespace nvst::ep {

namespace {

constexpr int kMaxNormalPes = 64;  // NormalArgs carries per-PE offsets by value

std::size_t align16(std::size_t v) { return (v + 15) / 16 * 16; }

// Rows are moved in 16-byte vectors; int64 statistics are added to (8).
void require_aligned(const void* p, const char* what, std::uintptr_t align = 16) {
  NVST_REQUIRE((reinterpret_cast<std::uintptr_t>(p) & (align - 1)) == 0, "nvst::ep: ", what, " must be ", align,
               "-byte aligned (got ", p, ")");
}

// The low-latency symmetric arrays of both sets, back to back from `base`
// (nullptr: only counted): the one layout behind the allocation, the
// constructor's heap check and low_latency_size_hint. Returns the bytes.
// Across nodes each set also has its far sections ([E_local][R][M] records
// = E x M) and their counts.
std::size_t lay_out_ll(nvst::ep::detail::LowLatencyArgs (&sets)[2], char* base, int max_tokens, int hidden, int n_pes,
                       int num_experts, int num_topk, bool cross_node) {
  using namespace nvst::ep::detail;
  const std::size_t el = static_cast<std::size_t>(num_experts / n_pes);
  const std::size_t rows = el * n_pes * max_tokens, r8 = static_cast<std::size_t>(n_pes) * 8;
  std::size_t used = 0;
  auto sym = [&](std::size_t bytes) {
    char* p = base ? base + used : nullptr;
    used += align16(bytes);
    return p;
  };
  for (LowLatencyArgs& a : sets) {
    a.x = sym(rows * hidden * 2);
    a.scales = sym(rows * (hidden / 128) * sizeof(float));  // float, or (smaller) UE8M0 bytes
    a.src_info = reinterpret_cast<int*>(sym(rows * 3 * sizeof(int)));
    a.slot_counter = reinterpret_cast<int*>(sym(el * sizeof(int)));
    a.dispatch_ready = reinterpret_cast<std::uint64_t*>(sym(r8));
    a.dispatch_done = reinterpret_cast<std::uint64_t*>(sym(r8));
    a.combine_x = sym(static_cast<std::size_t>(max_tokens) * num_topk * ll_combine_slot_bytes(hidden));
    a.combine_format = reinterpret_cast<std::uint64_t*>(sym(r8));
    a.combine_ready = reinterpret_cast<std::uint64_t*>(sym(r8));
    a.combine_done = reinterpret_cast<std::uint64_t*>(sym(r8));
    if (cross_node) {
      a.far_x = sym(static_cast<std::size_t>(num_experts) * max_tokens * ll_far_record_bytes(hidden));
      a.far_n = reinterpret_cast<int*>(sym(static_cast<std::size_t>(num_experts) * sizeof(int)));  // [R][E_local]
    }
  }
  return used;
}

void check_hidden(int hidden, bool fp8, const char* what) {
  NVST_REQUIRE(hidden > 0 && hidden % (fp8 ? 128 : 8) == 0, "nvst::ep::", what, ": hidden (", hidden,
               ") must be a positive multiple of ", fp8 ? 128 : 8, fp8 ? " (one fp8 scale per 128 channels)" : "");
}

// The rows PE p's regions must hold for a handle: received (dispatch
// region); sent back to it by its node peers plus, across nodes, one per
// token and other node (combine region); staged for, and relayed from,
// other nodes (send and relay regions; the relay's combine partials); and
// received from other nodes (staged for the combine).
struct PeRows {
  int recv = 0, near_back = 0, staged = 0, relayed = 0, far_recv = 0;
  int back() const { return near_back + staged; }
};
PeRows pe_rows(const nvst::ep::DispatchHandle& h, int p, bool cross_node) {
  const int R = h.n_pes, G = h.pes_per_node, N = R / G, node = p / G;
  PeRows r;
  r.recv = h.recv_offset(R, p);
  r.near_back = h.send_offset(p, (node + 1) * G) - h.send_offset(p, node * G);
  if (cross_node) {
    r.staged = h.rows_to_other_nodes(p);
    for (int n = 0; n < N; ++n)
      if (n != node) r.relayed += h.node_count[static_cast<std::size_t>(n * G + p % G) * N + node];
    r.far_recv = r.recv - (h.recv_offset((node + 1) * G, p) - h.recv_offset(node * G, p));
  }
  return r;
}

}  // namespace

std::size_t xtype_size(XType t) { return t == XType::kFP8 ? 1 : 2; }

int detail::device_sm_count() {
  static const int sms = [] {
    int dev = 0, n = 0;
    NVST_CHECK_CUDA(cudaGetDevice(&dev));
    NVST_CHECK_CUDA(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
    return n;
  }();
  return sms;
}

void Config::validate() const {
  const int sms = detail::device_sm_count();
  NVST_REQUIRE(num_sms >= 1 && num_sms <= sms, "nvst::ep::Config: num_sms ", num_sms, " must be in [1, ", sms,
               "] (the SMs of this GPU: every block must be resident at once)");
  NVST_REQUIRE(threads_per_block >= 64 && threads_per_block <= 1024 && threads_per_block % 32 == 0,
               "nvst::ep::Config: threads_per_block ", threads_per_block, " must be a multiple of 32 in [64, 1024]");
}

void DispatchHandle::record_use(cudaStream_t stream) const {
  if (memory) memory->record_use(stream);
}

int DispatchHandle::recv_offset(int src, int dst) const {
  int sum = 0;
  for (int s = 0; s < src; ++s) sum += count[static_cast<std::size_t>(s) * n_pes + dst];
  return sum;
}
int DispatchHandle::send_offset(int src, int dst) const {
  int sum = 0;
  for (int r = 0; r < dst; ++r) sum += count[static_cast<std::size_t>(src) * n_pes + r];
  return sum;
}
int DispatchHandle::rows_to_other_nodes(int src) const {
  const int N = n_nodes(), home = src / pes_per_node;
  int sum = 0;
  for (int n = 0; n < N; ++n)
    if (n != home) sum += node_count[static_cast<std::size_t>(src) * N + n];
  return sum;
}
int DispatchHandle::rows_to_other_nodes_flat(int src) const {
  int sum = 0;
  for (int r = 0; r < n_pes; ++r)
    if (r / pes_per_node != src / pes_per_node) sum += count[static_cast<std::size_t>(src) * n_pes + r];
  return sum;
}

namespace detail {

DispatchRegion DispatchRegion::plan(std::size_t bytes, int hidden, int num_topk, XType x_type, int positions) {
  DispatchRegion d;
  d.row_bytes = static_cast<std::size_t>(hidden) * xtype_size(x_type);
  d.positions = positions;
  const std::size_t scales = x_type == XType::kFP8 ? static_cast<std::size_t>(hidden) / 128 * 4 : 0;
  const std::size_t per_row =
      d.row_bytes + scales + static_cast<std::size_t>(num_topk) * 12 + 4 + static_cast<std::size_t>(positions) * 4;
  d.capacity = bytes > 6 * 16 ? static_cast<int>(std::min<std::size_t>((bytes - 6 * 16) / per_row, 1u << 30)) : 0;
  const std::size_t c = static_cast<std::size_t>(d.capacity);
  d.x = 0;
  d.scales = align16(c * d.row_bytes);
  d.topk_idx = d.scales + align16(c * scales);
  d.topk_weights = d.topk_idx + align16(c * num_topk * 8);
  d.src_idx = d.topk_weights + align16(c * num_topk * 4);
  d.dst_pos = d.src_idx + align16(c * 4);
  return d;
}

CombineRegion CombineRegion::plan(std::size_t bytes, int hidden, int num_topk) {
  CombineRegion r;
  const std::size_t per_row = static_cast<std::size_t>(hidden) * 2 + static_cast<std::size_t>(num_topk) * 4;
  r.capacity = bytes > 2 * 16 ? static_cast<int>(std::min<std::size_t>((bytes - 2 * 16) / per_row, 1u << 30)) : 0;
  r.x = 0;
  r.topk_weights = align16(static_cast<std::size_t>(r.capacity) * hidden * 2);
  return r;
}

}  // namespace detail

struct Buffer::Impl {
  // Normal mode.
  std::size_t nvl_bytes = 0;
  char* dispatch_region = nullptr;
  char* combine_region = nullptr;
  char* send_region = nullptr;    // staging of dispatch rows to other nodes (cross_node only)
  char* relay_region = nullptr;   // rows from other nodes to forward (cross_node only)
  char* combine_stage = nullptr;  // combine: results of rows from other nodes, for the relays (cross_node only)
  bool cross_node = false;        // some PEs are on other nodes
  int pes_per_node = 0;           // G: node n is PEs [n * G, (n + 1) * G)
  std::uint64_t* ready = nullptr;
  std::uint64_t* done = nullptr;
  std::uint64_t* combine_flags = nullptr;  // [R][kCombineChunks] (one node: normal_mode.cu's combine_kernel)
  detail::LaunchCounters* counters = nullptr;
  // Handle arrays and the layout's counts: stream-ordered, see handle_memory.hpp.
  std::shared_ptr<detail::HandlePool> handle_pool;
  // The count exchange of first dispatches (layout.cu), and how many there
  // were.
  detail::CountExchange counts{};
  std::uint64_t count_calls = 0;
  // Pinned landing place of the exchanged counts, stored there by the
  // layout's last block: a copy into pageable memory would hold the driver
  // until earlier work on the stream ends, and across nodes that work may
  // wait for the proxy, whose CUDA calls would then wait for the driver
  // (docs/09).
  int* h_counts = nullptr;
  std::size_t h_counts_len = 0;
  // Low-latency mode: two alternating sets.
  int ll_max_tokens = 0, ll_hidden = 0, ll_num_experts = 0, ll_num_topk = 0;
  detail::LowLatencyArgs ll[2]{};
  char* ll_block = nullptr;  // every low-latency symmetric array, one allocation
  std::size_t ll_block_bytes = 0;
  detail::LaunchCounters* ll_counters = nullptr;  // [2 sets][dispatch, combine]
  int* ll_recv_count = nullptr;                   // [2][E_local]
  std::vector<void*> ll_device;                   // own_row and the cross-node stages (cudaFree)
  int ll_next = 0;                                // the set the next dispatch uses
  int ll_last_sent = 0;                           // the set of the last dispatch's send half
};

// The kernels' view of a dispatch with this handle: every PE's offsets as
// this PE needs them, and this Buffer's regions and counters.
detail::NormalArgs Buffer::normal_args(const DispatchHandle& handle, int hidden, const detail::DispatchRegion& dr,
                                       const detail::CombineRegion& cr) const {
  const Impl& m = *impl_;
  detail::NormalArgs a{};
  a.num_tokens = handle.num_tokens;
  a.hidden = hidden;
  a.num_topk = handle.num_topk;
  a.num_experts = handle.num_experts;
  a.send_pos = handle.send_pos.get();
  const int G = m.pes_per_node, N = n_pes_ / G, node = rank_ / G, g = rank_ % G;
  // A combine region holds the rows sent back by the sender's node peers,
  // node peer by node peer, then (across nodes) one row per token and node.
  auto near_offset = [&](int src, int dst) {  // rows before dst's among src's node peers
    return handle.send_offset(src, dst) - handle.send_offset(src, src / G * G);
  };
  for (int r = 0; r < n_pes_; ++r) {
    const bool near = r / G == node;
    a.recv_offset[r] = handle.recv_offset(rank_, r);
    a.send_offset[r] = near ? near_offset(rank_, r) : 0;
    a.recv_begin[r] = handle.recv_offset(r, rank_);
    a.peer_send_offset[r] = near ? near_offset(r, rank_) : 0;
  }
  a.send_offset[n_pes_] = near_offset(rank_, (node + 1) * G);
  a.recv_begin[n_pes_] = handle.num_recv_tokens;
  // Across nodes: the staging and relay offsets (normal_mode.cu).
  a.pes_per_node = G;
  a.n_nodes = N;
  a.node_pos = handle.node_pos.get();
  auto node_count = [&](int src, int n) {
    return n == src / G ? 0 : handle.node_count[static_cast<std::size_t>(src) * N + n];
  };
  a.node_send_offset[0] = 0;
  a.relay_begin[0] = 0;
  for (int n = 0; n < N; ++n) {
    a.node_send_offset[n + 1] = a.node_send_offset[n] + node_count(rank_, n);
    a.relay_begin[n + 1] = a.relay_begin[n] + node_count(n * G + g, node);
    a.relay_put_offset[n] = 0;  // rows before mine at my relay on node n: from local rank g of nodes before mine
    for (int k = 0; k < node; ++k) a.relay_put_offset[n] += node_count(k * G + g, n);
    for (int j = 0; j < G; ++j) a.relay_dst_offset[n * G + j] = handle.recv_offset(n * G + g, node * G + j);
    // The partials this PE sends back to PE (n, g): after its node peers'
    // rows and the partials of nodes before this one.
    const int s = n * G + g;
    a.relay_back_offset[n] = near_offset(s, (n + 1) * G);
    for (int k = 0; k < node; ++k) a.relay_back_offset[n] += node_count(s, k);
  }
  for (int j = 0; j < G; ++j) {
    a.node_recv_lo[j] = handle.recv_offset(node * G, node * G + j);
    a.node_recv_hi[j] = handle.recv_offset((node + 1) * G, node * G + j);
  }
  a.send_region = m.send_region;
  a.relay_region = m.relay_region;
  a.relay_pos = handle.relay_pos.get();
  a.combine_stage = m.combine_stage;
  a.dispatch_region = m.dispatch_region;
  a.dr = dr;
  a.combine_region = m.combine_region;
  a.cr = cr;
  a.ready = m.ready;
  a.done = m.done;
  a.combine_flags = m.combine_flags;
  a.counters = m.counters;
  return a;
}

Buffer::Buffer(std::size_t num_nvl_bytes, int num_max_dispatch_tokens_per_rank, int ll_hidden, int ll_num_experts,
               int ll_num_topk)
    : impl_(std::make_unique<Impl>()) {
  NVST_REQUIRE(nvst::initialized(), "nvst::ep::Buffer: call nvst::init() first");
  NVST_REQUIRE(nvst::device() >= 0,
               "nvst::ep::Buffer: this PE has no GPU (host-memory heaps); the EP buffer needs GPUs");
  rank_ = nvst::my_pe();
  n_pes_ = nvst::n_pes();
  Impl& m = *impl_;
  m.pes_per_node = nvst::team_n_pes(nvst::Team::kNode);
  m.cross_node = m.pes_per_node != n_pes_;
  NVST_REQUIRE(n_pes_ <= kMaxNormalPes, "nvst::ep::Buffer: at most ", kMaxNormalPes, " PEs");
  {  // Blocks count each other's blocks: every PE must launch the same grids.
    // And the relays pair PEs of one local rank: nodes must be alike.
    const int mine[3] = {detail::device_sm_count(), m.pes_per_node, nvst::team_my_pe(nvst::Team::kNode)};
    const auto all = nvst::bootstrap_allgather(mine, sizeof(mine));
    for (int p = 0; p < n_pes_; ++p) {
      const int* other = reinterpret_cast<const int*>(all.data()) + 3 * p;
      NVST_REQUIRE(other[0] == mine[0], "nvst::ep::Buffer: PE ", p, "'s GPU has ", other[0], " SMs and PE ", rank_,
                   "'s has ", mine[0], "; every PE needs the same (MIG slices of different sizes?)");
      NVST_REQUIRE(other[1] == mine[1] && other[2] == p % mine[1], "nvst::ep::Buffer: PE ", p, " is PE ", other[2],
                   " of a node of ", other[1], " and PE ", rank_, "'s node has ", mine[1],
                   "; every node needs the same number of PEs, in rank order");
    }
  }
  NVST_REQUIRE(num_max_dispatch_tokens_per_rank >= 0, "nvst::ep::Buffer: negative num_max_dispatch_tokens_per_rank");
  // Sized here for the heap check; laid out over the block below (whose
  // arguments are checked there, before use).
  std::size_t ll_bytes = 0;
  if (num_max_dispatch_tokens_per_rank > 0 && ll_hidden > 0 && ll_num_experts >= n_pes_ && ll_num_topk > 0)
    ll_bytes = lay_out_ll(m.ll, nullptr, num_max_dispatch_tokens_per_rank, ll_hidden, n_pes_, ll_num_experts,
                          ll_num_topk, m.cross_node);
  const std::size_t flags = num_nvl_bytes > 0 ? static_cast<std::size_t>(n_pes_) * detail::kCombineChunks * 8 : 0;
  // The count exchange: two sets of a row per PE, room for any layout.
  const int count_row_ints = detail::kCountHeaderInts + 2 * n_pes_ + detail::kMaxLayoutExperts;
  const std::size_t count_table =
      num_nvl_bytes > 0 ? 2 * static_cast<std::size_t>(n_pes_) * (count_row_ints * sizeof(int) + 8) : 0;
  const std::size_t want = (m.cross_node ? 5 : 2) * align16(num_nvl_bytes / 2) + flags + count_table + ll_bytes;
  NVST_REQUIRE(want + (std::size_t{1} << 20) <= nvst::heap_free_bytes(), "nvst::ep::Buffer: needs about ", want >> 20,
               " MiB of symmetric heap, ", nvst::heap_free_bytes() >> 20,
               " MiB are free; raise NVST_SYMMETRIC_SIZE (or InitOptions::heap_bytes)");
  if (num_nvl_bytes > 0) {
    m.nvl_bytes = align16(num_nvl_bytes / 2) * 2;
    m.dispatch_region = static_cast<char*>(nvst::malloc(m.nvl_bytes / 2));
    m.combine_region = static_cast<char*>(nvst::malloc(m.nvl_bytes / 2));
    if (m.cross_node) {
      m.send_region = static_cast<char*>(nvst::malloc(m.nvl_bytes / 2));
      m.relay_region = static_cast<char*>(nvst::malloc(m.nvl_bytes / 2));
      m.combine_stage = static_cast<char*>(nvst::malloc(m.nvl_bytes / 2));
    }
    m.ready = static_cast<std::uint64_t*>(nvst::calloc(n_pes_, sizeof(std::uint64_t)));
    m.done = static_cast<std::uint64_t*>(nvst::calloc(n_pes_, sizeof(std::uint64_t)));
    m.combine_flags = static_cast<std::uint64_t*>(
        nvst::calloc(static_cast<std::size_t>(n_pes_) * detail::kCombineChunks, sizeof(std::uint64_t)));
    m.counts.row_ints = count_row_ints;
    const std::size_t count_rows = 2 * static_cast<std::size_t>(n_pes_);  // two sets
    m.counts.table = static_cast<int*>(nvst::malloc(count_rows * count_row_ints * sizeof(int)));
    m.counts.arrived = static_cast<std::uint64_t*>(nvst::calloc(count_rows, sizeof(std::uint64_t)));
    NVST_CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&m.counters), sizeof(detail::LaunchCounters)));
    NVST_CHECK_CUDA(cudaMemset(m.counters, 0, sizeof(detail::LaunchCounters)));
    m.handle_pool = std::make_shared<detail::HandlePool>(nvst::device());
    detail::preload_normal_kernels();
    detail::preload_layout_kernels();
  }
  if (num_max_dispatch_tokens_per_rank > 0) {
    check_hidden(ll_hidden, true, "Buffer (low latency)");
    NVST_REQUIRE(ll_num_experts >= n_pes_ && ll_num_experts % n_pes_ == 0, "nvst::ep::Buffer: ll_num_experts (",
                 ll_num_experts, ") must be a positive multiple of the number of PEs (", n_pes_, ")");
    NVST_REQUIRE(ll_num_topk >= 1 && ll_num_topk <= 32, "nvst::ep::Buffer: ll_num_topk ", ll_num_topk,
                 " must be in [1, 32]");
    NVST_REQUIRE(ll_hidden <= detail::kMaxLowLatencyHidden, "nvst::ep::Buffer: ll_hidden ", ll_hidden,
                 " exceeds the low-latency mode's ", detail::kMaxLowLatencyHidden);
    m.ll_max_tokens = num_max_dispatch_tokens_per_rank;
    m.ll_hidden = ll_hidden;
    m.ll_num_experts = ll_num_experts;
    m.ll_num_topk = ll_num_topk;
    const int el = ll_num_experts / n_pes_;
    NVST_CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&m.ll_counters), 4 * sizeof(detail::LaunchCounters)));
    NVST_CHECK_CUDA(cudaMemset(m.ll_counters, 0, 4 * sizeof(detail::LaunchCounters)));
    NVST_CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&m.ll_recv_count), 2 * el * sizeof(int)));
    NVST_CHECK_CUDA(cudaMemset(m.ll_recv_count, 0, 2 * el * sizeof(int)));
    // All symmetric arrays of both sets in one block (DeepEP's RDMA buffer,
    // which get_local_buffer_tensor(use_rdma_buffer=True) shows).
    m.ll_block_bytes = ll_bytes;
    m.ll_block = static_cast<char*>(nvst::calloc(1, m.ll_block_bytes));  // collective; zeroed: signals start at 0
    lay_out_ll(m.ll, m.ll_block, m.ll_max_tokens, ll_hidden, n_pes_, ll_num_experts, ll_num_topk, m.cross_node);
    for (int b = 0; b < 2; ++b) {
      detail::LowLatencyArgs& a = m.ll[b];
      a.max_tokens = m.ll_max_tokens;
      a.hidden = ll_hidden;
      a.num_topk = ll_num_topk;
      a.num_experts = ll_num_experts;
      a.recv_count = m.ll_recv_count + b * el;
      void* own_row = nullptr;
      NVST_CHECK_CUDA(cudaMalloc(&own_row, static_cast<std::size_t>(m.ll_max_tokens) * ll_num_topk * sizeof(int)));
      m.ll_device.push_back(own_row);
      NVST_CHECK_CUDA(cudaMemset(own_row, 0xFF, static_cast<std::size_t>(m.ll_max_tokens) * ll_num_topk * sizeof(int)));
      a.own_row = static_cast<int*>(own_row);
      a.dispatch_counters = m.ll_counters + 2 * b;
      a.combine_counters = m.ll_counters + 2 * b + 1;
      if (m.cross_node) {  // records to other nodes, staged for the put
        a.far_rec = detail::ll_far_record_bytes(ll_hidden);
        void* stage = nullptr;
        NVST_CHECK_CUDA(cudaMalloc(&stage, static_cast<std::size_t>(m.ll_max_tokens) * ll_num_topk * a.far_rec));
        m.ll_device.push_back(stage);
        a.far_stage = static_cast<char*>(stage);
        void* count = nullptr;
        NVST_CHECK_CUDA(cudaMalloc(&count, 2 * static_cast<std::size_t>(ll_num_experts) * sizeof(int)));
        m.ll_device.push_back(count);
        NVST_CHECK_CUDA(cudaMemset(count, 0, 2 * static_cast<std::size_t>(ll_num_experts) * sizeof(int)));
        a.far_count = static_cast<int*>(count);
        // One per set, as far_stage: send halves of the two sets may run
        // on two streams at once.
        const std::size_t far_pes = static_cast<std::size_t>(n_pes_ - m.pes_per_node);
        void* cstage = nullptr;
        NVST_CHECK_CUDA(
            cudaMalloc(&cstage, far_pes * m.ll_max_tokens * ll_num_topk * detail::ll_combine_slot_bytes(ll_hidden)));
        m.ll_device.push_back(cstage);
        a.far_combine_stage = static_cast<char*>(cstage);
      }
    }
    detail::preload_ll_kernels();
  }
  NVST_CHECK_CUDA(cudaDeviceSynchronize());
  nvst::barrier_all();
}

Buffer::~Buffer() {
  if (!impl_ || !nvst::initialized()) return;  // after finalize the heap is gone already
  Impl& m = *impl_;
  try {
    cudaDeviceSynchronize();
    if (m.ll_block) nvst::free(m.ll_block);
    if (m.counts.arrived) nvst::free(m.counts.arrived);
    if (m.counts.table) nvst::free(m.counts.table);
    if (m.combine_flags) nvst::free(m.combine_flags);
    if (m.done) nvst::free(m.done);
    if (m.ready) nvst::free(m.ready);
    if (m.combine_stage) nvst::free(m.combine_stage);
    if (m.relay_region) nvst::free(m.relay_region);
    if (m.send_region) nvst::free(m.send_region);
    if (m.combine_region) nvst::free(m.combine_region);
    if (m.dispatch_region) nvst::free(m.dispatch_region);
  } catch (const std::exception&) {
    // A destructor must not throw; the runtime's finalize reclaims the heap.
  }
  cudaFree(m.counters);
  for (void* p : m.ll_device) cudaFree(p);
  cudaFree(m.ll_counters);
  cudaFree(m.ll_recv_count);
  cudaFreeHost(m.h_counts);
}

std::size_t Buffer::nvl_size_hint(int num_rows, int hidden, int num_topk, XType x_type) {
  NVST_REQUIRE(num_rows >= 0 && hidden > 0 && num_topk > 0, "nvst::ep::Buffer::nvl_size_hint: bad shape");
  // Across nodes a relayed row carries one position per PE of the node.
  const int G = nvst::initialized() ? nvst::team_n_pes(nvst::Team::kNode) : 0;
  const bool across = G > 0 && G != nvst::n_pes();
  const std::size_t row = static_cast<std::size_t>(hidden) * xtype_size(x_type) +
                          (x_type == XType::kFP8 ? static_cast<std::size_t>(hidden) / 128 * 4 : 0) +
                          static_cast<std::size_t>(num_topk) * 12 + 4 + (across ? static_cast<std::size_t>(G) * 4 : 0);
  const std::size_t crow = static_cast<std::size_t>(hidden) * 2 + static_cast<std::size_t>(num_topk) * 4;
  return 2 * (std::max(row, crow) * static_cast<std::size_t>(num_rows) + 6 * 16);
}

std::size_t Buffer::low_latency_size_hint(int max_tokens, int hidden, int n_pes, int num_experts, int num_topk) {
  NVST_REQUIRE(max_tokens > 0 && hidden > 0 && n_pes > 0 && num_experts >= n_pes && num_topk > 0,
               "nvst::ep::Buffer::low_latency_size_hint: bad shape");
  detail::LowLatencyArgs counted[2]{};
  return lay_out_ll(counted, nullptr, max_tokens, hidden, n_pes, num_experts, num_topk, false);
}

DispatchOutput Buffer::dispatch(const DispatchInput& in, DispatchHandle& handle, const Config& config,
                                cudaStream_t stream) {
  Impl& m = *impl_;
  NVST_REQUIRE(m.nvl_bytes > 0,
               "nvst::ep::Buffer::dispatch: this Buffer has no normal-mode memory (num_nvl_bytes = 0)");
  config.validate();
  const bool fp8 = in.x_type == XType::kFP8;
  check_hidden(in.hidden, fp8, "dispatch");
  NVST_REQUIRE(in.num_tokens >= 0, "nvst::ep::dispatch: num_tokens ", in.num_tokens, " is negative");
  NVST_REQUIRE(in.num_topk >= 1 && in.num_topk <= 32, "nvst::ep::dispatch: num_topk ", in.num_topk, " not in [1, 32]");
  NVST_REQUIRE(in.num_experts >= n_pes_ && in.num_experts % n_pes_ == 0, "nvst::ep::dispatch: num_experts (",
               in.num_experts, ") must be a positive multiple of the number of PEs (", n_pes_, ")");
  NVST_REQUIRE(in.expert_alignment >= 1, "nvst::ep::dispatch: expert_alignment must be >= 1");
  if (in.num_tokens > 0) {
    NVST_REQUIRE(in.x && in.topk_idx, "nvst::ep::dispatch: x and topk_idx are required");
    NVST_REQUIRE(!fp8 || in.x_scales, "nvst::ep::dispatch: fp8 x needs x_scales [T, hidden / 128]");
    require_aligned(in.x, "x");
  }
  const detail::DispatchRegion dr = detail::DispatchRegion::plan(m.nvl_bytes / 2, in.hidden, in.num_topk, in.x_type);
  const detail::CombineRegion cr = detail::CombineRegion::plan(m.nvl_bytes / 2, in.hidden, in.num_topk);
  const int G = m.pes_per_node, N = n_pes_ / G;
  const detail::DispatchRegion rr =
      detail::DispatchRegion::plan(m.nvl_bytes / 2, in.hidden, in.num_topk, in.x_type, m.cross_node ? G : 0);
  // Every PE checks every PE's rows against this shape's regions, so all
  // refuse together instead of some writing out of bounds.
  auto check_fit = [&](const DispatchHandle& h) {
    for (int p = 0; p < n_pes_; ++p) {
      const PeRows r = pe_rows(h, p, m.cross_node);
      const int most = std::max({r.recv, r.back(), r.staged, r.relayed});
      NVST_REQUIRE(r.recv <= dr.capacity && r.back() <= cr.capacity && r.staged <= rr.capacity &&
                       r.relayed <= rr.capacity && r.relayed <= cr.capacity && r.far_recv <= cr.capacity,
                   "nvst::ep::dispatch: PE ", p, " receives ", r.recv, ", gets back ", r.back(), ", stages ", r.staged,
                   " and relays ", r.relayed, " rows; this Buffer holds ",
                   std::min({dr.capacity, cr.capacity, m.cross_node ? rr.capacity : dr.capacity}),
                   ": make num_nvl_bytes at least Buffer::nvl_size_hint(", most,
                   ", ...) = ", Buffer::nvl_size_hint(most, in.hidden, in.num_topk, in.x_type));
    }
  };

  if (!handle.valid()) {
    DispatchHandle h;  // assigned to `handle` only once complete
    // Layout, then every PE learns every PE's counts (the receiver must know
    // how many rows arrive, and each sender where its rows start).
    const int R = n_pes_, E = in.num_experts;
    // A row of the exchange: header, then counts per PE, per node, per expert.
    const int row = detail::kCountHeaderInts + R + N + E;
    const std::size_t table = static_cast<std::size_t>(R) * row;
    if (m.h_counts_len < table) {
      // Room for 1024 experts at once: cudaFreeHost waits for the device,
      // as cudaFree does, so growing again is rare.
      NVST_CHECK_CUDA(cudaFreeHost(m.h_counts));
      m.h_counts = nullptr;
      m.h_counts_len = std::max(table, static_cast<std::size_t>(R) * (detail::kCountHeaderInts + R + N + 1024));
      NVST_CHECK_CUDA(cudaMallocHost(reinterpret_cast<void**>(&m.h_counts), m.h_counts_len * sizeof(int)));
    }
    // The arrays come from the handle pool: no call here may wait for the
    // device (handle_memory.hpp).
    const std::size_t T = static_cast<std::size_t>(in.num_tokens);
    h.memory = std::make_shared<HandleMemory>(m.handle_pool, T * R * sizeof(int),
                                              m.cross_node ? T * N * sizeof(int) : 0, stream);
    h.send_pos = std::shared_ptr<int>(h.memory, h.memory->send_pos);
    if (m.cross_node) h.node_pos = std::shared_ptr<int>(h.memory, h.memory->node_pos);
    int* const send_pos = h.memory->send_pos;
    int* const node_pos = h.memory->node_pos;
    // The layout writes this PE's counts into its row of this call's set of
    // the exchange table, sends the row to every PE and stores every PE's
    // into h_counts (layout.cu).
    const detail::CountHeader hdr{
        in.hidden, in.num_topk, E, static_cast<int>(in.x_type), config.num_sms, config.threads_per_block};
    const detail::CountExchangeCall exchange{m.counts, hdr, row, ++m.count_calls, m.h_counts};
    int* const counts = detail::count_row(m.counts, exchange.call, R, rank_) + detail::kCountHeaderInts;
    LayoutOutput lo;
    lo.num_tokens_per_rank = counts;
    lo.num_tokens_per_node = counts + R;
    lo.num_tokens_per_expert = counts + R + N;
    detail::launch_layout(in.topk_idx, in.num_tokens, in.num_topk, E, R, G, lo, send_pos, node_pos, stream, &exchange);
    NVST_CHECK_CUDA(cudaStreamSynchronize(stream));
    auto row_of = [&](int p) -> const int* { return m.h_counts + static_cast<std::size_t>(p) * row; };
    for (int p = 0; p < R; ++p)
      NVST_REQUIRE(std::memcmp(row_of(p), &hdr, sizeof(hdr)) == 0, "nvst::ep::dispatch: PE ", p,
                   " called with another hidden/num_topk/num_experts/x_type/Config than PE ", rank_,
                   " (every PE must pass the same)");
    h.n_pes = R;
    h.num_tokens = in.num_tokens;
    h.num_topk = in.num_topk;
    h.num_experts = E;
    h.pes_per_node = G;
    h.count.assign(static_cast<std::size_t>(R) * R, 0);
    h.node_count.assign(static_cast<std::size_t>(R) * N, 0);
    const int at = sizeof(hdr) / sizeof(int);
    for (int s = 0; s < R; ++s) {
      for (int r = 0; r < R; ++r) h.count[static_cast<std::size_t>(s) * R + r] = row_of(s)[at + r];
      for (int n = 0; n < N; ++n) h.node_count[static_cast<std::size_t>(s) * N + n] = row_of(s)[at + R + n];
    }
    const int el = E / R;
    h.num_recv_tokens_per_expert.assign(el, 0);
    for (int s = 0; s < R; ++s)
      for (int e = 0; e < el; ++e) h.num_recv_tokens_per_expert[e] += row_of(s)[at + R + N + rank_ * el + e];
    for (int& c : h.num_recv_tokens_per_expert)
      c = (c + in.expert_alignment - 1) / in.expert_alignment * in.expert_alignment;
    h.num_recv_tokens = h.recv_offset(R, rank_);
    check_fit(h);
    if (m.cross_node) {  // filled by the dispatch's relay, read by the combine's
      const std::size_t n = static_cast<std::size_t>(std::max(1, pe_rows(h, rank_, true).relayed)) * G;
      h.memory->allocate_relay_pos(n * sizeof(int), stream);
      h.relay_pos = std::shared_ptr<int>(h.memory, h.memory->relay_pos);
    }
    handle = std::move(h);
  } else {
    NVST_REQUIRE(handle.n_pes == n_pes_ && handle.num_tokens == in.num_tokens && handle.num_topk == in.num_topk &&
                     handle.num_experts == in.num_experts,
                 "nvst::ep::dispatch: the handle was made for ", handle.num_tokens, " tokens, top-", handle.num_topk,
                 " of ", handle.num_experts, " experts; this call has ", in.num_tokens, ", top-", in.num_topk, " of ",
                 in.num_experts);
    NVST_REQUIRE(handle.pes_per_node == G, "nvst::ep::dispatch: the handle was made by a Buffer with other nodes");
    check_fit(handle);
  }

  detail::NormalArgs a = normal_args(handle, in.hidden, dr, cr);
  a.x_type = in.x_type;
  a.rr = rr;
  detail::launch_normal_dispatch(a, in, config, stream);
  handle.record_use(stream);

  DispatchOutput out;
  out.num_recv_tokens = handle.num_recv_tokens;
  out.recv_x = m.dispatch_region + dr.x;
  out.recv_x_scales = fp8 ? reinterpret_cast<float*>(m.dispatch_region + dr.scales) : nullptr;
  out.recv_topk_idx = reinterpret_cast<std::int64_t*>(m.dispatch_region + dr.topk_idx);
  out.recv_topk_weights = in.topk_weights ? reinterpret_cast<float*>(m.dispatch_region + dr.topk_weights) : nullptr;
  out.recv_src_idx = reinterpret_cast<int*>(m.dispatch_region + dr.src_idx);
  return out;
}

void Buffer::combine(const CombineInput& in, const DispatchHandle& handle, const CombineOutput& out,
                     const Config& config, cudaStream_t stream) {
  Impl& m = *impl_;
  NVST_REQUIRE(m.nvl_bytes > 0, "nvst::ep::Buffer::combine: this Buffer has no normal-mode memory");
  NVST_REQUIRE(handle.valid() && handle.n_pes == n_pes_, "nvst::ep::combine: needs the handle of a dispatch");
  config.validate();
  check_hidden(in.hidden, false, "combine");
  NVST_REQUIRE(handle.num_recv_tokens == 0 || in.x, "nvst::ep::combine: x is null");
  NVST_REQUIRE(handle.num_tokens == 0 || out.combined_x, "nvst::ep::combine: combined_x is null");
  NVST_REQUIRE(!in.topk_weights || out.combined_topk_weights || handle.num_tokens == 0,
               "nvst::ep::combine: topk_weights given but combined_topk_weights is null");
  if (in.x) require_aligned(in.x, "x");
  if (in.bias) require_aligned(in.bias, "bias");
  if (in.bias_2) require_aligned(in.bias_2, "bias_2");
  if (out.combined_x) require_aligned(out.combined_x, "combined_x");
  const detail::CombineRegion cr = detail::CombineRegion::plan(m.nvl_bytes / 2, in.hidden, handle.num_topk);
  for (int p = 0; p < n_pes_; ++p) {
    const PeRows r = pe_rows(handle, p, m.cross_node);
    NVST_REQUIRE(r.back() <= cr.capacity && r.relayed <= cr.capacity && r.far_recv <= cr.capacity,
                 "nvst::ep::combine: PE ", p, " gets back ", r.back(), ", relays ", r.relayed, " and stages ",
                 r.far_recv, " rows; this Buffer holds ", cr.capacity, " of hidden ", in.hidden);
  }
  detail::NormalArgs a = normal_args(handle, in.hidden, {}, cr);
  a.chunk_rows = detail::combine_chunk_rows(*std::max_element(handle.count.begin(), handle.count.end()));
  detail::launch_normal_combine(a, in, out, handle.num_recv_tokens, config, stream);
  handle.record_use(stream);
}

Buffer::Region Buffer::local_nvl_region() const {
  const Impl& m = *impl_;
  return {m.dispatch_region, m.dispatch_region ? m.nvl_bytes / 2 : 0};
}

Buffer::Region Buffer::local_ll_region() const {
  const Impl& m = *impl_;
  return {m.ll_block, m.ll_block_bytes};
}

LowLatencyDispatchOutput Buffer::low_latency_dispatch(const LowLatencyDispatchInput& in, cudaStream_t stream,
                                                      Phase phase, int buffer_index) {
  Impl& m = *impl_;
  NVST_REQUIRE(m.ll_max_tokens > 0,
               "nvst::ep::low_latency_dispatch: this Buffer has no low-latency memory "
               "(num_max_dispatch_tokens_per_rank = 0)");
  NVST_REQUIRE(in.hidden == m.ll_hidden && in.num_experts == m.ll_num_experts && in.num_topk == m.ll_num_topk,
               "nvst::ep::low_latency_dispatch: shape hidden ", in.hidden, ", ", in.num_experts, " experts, top-",
               in.num_topk, " differs from the Buffer's (", m.ll_hidden, ", ", m.ll_num_experts, ", top-",
               m.ll_num_topk, ")");
  NVST_REQUIRE(in.num_tokens >= 0 && in.num_tokens <= m.ll_max_tokens,
               "nvst::ep::low_latency_dispatch: ", in.num_tokens, " tokens; the Buffer takes at most ", m.ll_max_tokens,
               " per PE");
  if (in.num_tokens > 0) {
    NVST_REQUIRE(in.x && in.topk_idx, "nvst::ep::low_latency_dispatch: x and topk_idx are required");
    require_aligned(in.x, "x");
  }
  if (in.use_ue8m0)
    NVST_REQUIRE(in.use_fp8 && in.round_scale && m.ll_hidden % 512 == 0,
                 "nvst::ep::low_latency_dispatch: use_ue8m0 needs use_fp8, round_scale and hidden % 512 == 0 "
                 "(got use_fp8 ",
                 in.use_fp8, ", round_scale ", in.round_scale, ", hidden ", m.ll_hidden, ")");
  require_aligned(in.wait_recv_cost_stats, "low_latency_dispatch: wait_recv_cost_stats", 8);
  NVST_REQUIRE(buffer_index >= -1 && buffer_index <= 1, "nvst::ep::low_latency_dispatch: buffer_index ", buffer_index,
               " must be 0, 1 or -1 (the last sent)");
  int set = buffer_index >= 0 ? buffer_index : m.ll_last_sent;
  if (phase != Phase::kReceive) {
    set = m.ll_next;
    m.ll_next ^= 1;
    m.ll_last_sent = set;
    m.ll[set].use_fp8 = in.use_fp8;  // a set keeps its send's choices: its receive half needs them
    m.ll[set].use_ue8m0 = in.use_ue8m0;
  }
  const detail::LowLatencyArgs& a = m.ll[set];
  detail::launch_ll_dispatch(a, in, phase, stream);
  return low_latency_views(set, a.use_fp8);
}

LowLatencyDispatchOutput Buffer::low_latency_views(int buffer_index, bool use_fp8) const {
  const Impl& m = *impl_;
  NVST_REQUIRE(m.ll_max_tokens > 0, "nvst::ep::low_latency_views: this Buffer has no low-latency memory");
  NVST_REQUIRE(buffer_index == 0 || buffer_index == 1, "nvst::ep::low_latency_views: buffer_index ", buffer_index,
               " must be 0 or 1");
  const detail::LowLatencyArgs& a = m.ll[buffer_index];
  LowLatencyDispatchOutput out;
  out.recv_x = a.x;
  out.recv_x_scales = use_fp8 ? a.scales : nullptr;
  out.recv_count = a.recv_count;
  out.recv_src_info = a.src_info;
  out.max_rows_per_expert = n_pes_ * m.ll_max_tokens;
  out.buffer_index = buffer_index;
  return out;
}

void Buffer::low_latency_combine(const LowLatencyCombineInput& in, void* combined_x, cudaStream_t stream, Phase phase) {
  Impl& m = *impl_;
  NVST_REQUIRE(m.ll_max_tokens > 0, "nvst::ep::low_latency_combine: this Buffer has no low-latency memory");
  NVST_REQUIRE(in.buffer_index == 0 || in.buffer_index == 1, "nvst::ep::low_latency_combine: buffer_index ",
               in.buffer_index, " must be 0 or 1 (from the dispatch's output)");
  NVST_REQUIRE(in.hidden == m.ll_hidden && in.num_experts == m.ll_num_experts && in.num_topk == m.ll_num_topk,
               "nvst::ep::low_latency_combine: shape differs from the Buffer's");
  NVST_REQUIRE(in.num_tokens >= 0 && in.num_tokens <= m.ll_max_tokens, "nvst::ep::low_latency_combine: ", in.num_tokens,
               " tokens; at most ", m.ll_max_tokens);
  if (phase != Phase::kReceive) {
    NVST_REQUIRE(in.x, "nvst::ep::low_latency_combine: x is null");
    require_aligned(in.x, "x");
    NVST_REQUIRE(in.x_type == CombineType::kBF16 || in.x_type == CombineType::kFP16,
                 "nvst::ep::low_latency_combine: x_type must be bf16 or fp16 (the rows travel as they are)");
    NVST_REQUIRE(!in.use_logfmt || in.x_type == CombineType::kBF16,
                 "nvst::ep::low_latency_combine: use_logfmt encodes bf16 rows; these are fp16");
  }
  if (phase != Phase::kSend && in.num_tokens > 0) {
    NVST_REQUIRE(in.topk_idx && in.topk_weights && combined_x,
                 "nvst::ep::low_latency_combine: topk_idx, topk_weights and combined_x are required");
    require_aligned(combined_x, "combined_x");
  }
  require_aligned(in.wait_recv_cost_stats, "low_latency_combine: wait_recv_cost_stats", 8);
  detail::launch_ll_combine(m.ll[in.buffer_index], in, combined_x, phase, stream);
}

}  // namespace nvst::ep
