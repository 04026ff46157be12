// Expert-parallel Buffer against a CPU reference (tests/common/ep_reference.hpp):
//  - get_dispatch_layout: counts per PE, node and expert, is_token_in_rank;
//  - normal dispatch, bf16 and fp8, every routing kind (masked slots, tokens
//    to no PE, every token to one expert, a PE with 0 tokens): every received
//    row, its local top-k, weights, source index and scales, bit for bit;
//    again with the cached handle after the receive rows were poisoned;
//  - normal combine (with and without bias): the sum over PEs in PE order,
//    bit for bit, and the top-k weights summed back;
//  - low-latency dispatch (bf16 exact, fp8 within e4m3 rounding) and combine
//    (weighted, bit for bit), with the send/receive halves split, and under a
//    CUDA graph replayed with new inputs; fp16 rows combined again on the
//    same dispatch, to fp16 and to float32, bit for bit; the LogFMT combine
//    within its error bound (bf16 groups bit for bit), on every PE or on
//    some only;
//  - bad input refused with a message on every PE (no hang);
//  - --stress N: N iterations of random routing (default 10^4), and
//    --ll-stress N of the low-latency path (default 1000).
//   nvst_ep_tests --np 2 [--seed S] [--stress N] [--ll-stress N]
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "device_io.hpp"
#include "ep/logfmt.hpp"
#include "ep_reference.hpp"
#include "error_of.hpp"
#include "gpu_job.hpp"
#include "nvst/ep.hpp"
#include "nvst/launch.hpp"
#include "nvst/nvst.hpp"

using namespace nvst::test;
using nvst::ep::XType;

namespace {

std::uint64_t g_seed = 1;
int g_stress = 10000;
int g_ll_stress = 1000;

// FP8 payload derived from the bf16 bits (any e4m3 byte but the NaNs), and
// scales: the dispatch only copies them, so they are checked exactly.
std::uint8_t fp8_of(std::uint16_t b) {
  std::uint8_t v = static_cast<std::uint8_t>(b ^ (b >> 8));
  return (v & 0x7F) == 0x7F ? static_cast<std::uint8_t>(v ^ 1) : v;
}
float scale_of(int pe, int t, int j) { return 0.25f + static_cast<float>((pe * 7919 + t * 31 + j) % 97) / 64.f; }

struct Errors {
  long long bad = 0;
  std::string first;
  void add(bool wrong, const std::string& what) {
    if (!wrong) return;
    if (first.empty()) first = what;
    ++bad;
  }
};

struct Shape {
  int T, H, K, E;
};

// Normal mode: layout, dispatch, poisoned re-dispatch with the handle,
// combine. Returns the errors seen on this PE.
// corrupt: flip one received byte before checking (the checker's own test).
// queued_copy: right after the dispatch is launched, a device-to-host copy
// of x on the legacy default stream that waits for it (what torch's .cpu()
// does after EventOverlap::current_stream_wait): the dispatch must not need
// anything queued behind it.
Errors normal_case(nvst::ep::Buffer& buf, RouteKind kind, Shape sh, bool fp8, bool bias, std::uint64_t seed,
                   const nvst::ep::Config& cfg, cudaStream_t s, bool check_layout, bool corrupt = false,
                   bool queued_copy = false) {
  const int me = nvst::my_pe(), R = nvst::n_pes(), el = sh.E / R;
  Errors err;
  std::vector<PeInput> all = make_all_inputs(kind, R, sh.T, sh.H, sh.K, sh.E, seed);
  const PeInput& mine = all[me];
  const int T = mine.num_tokens;
  const std::size_t TH = static_cast<std::size_t>(T) * sh.H;
  auto payload = [&](const PeInput& in) {  // the bytes dispatch moves for this PE's x
    std::vector<std::uint8_t> b(static_cast<std::size_t>(in.num_tokens) * sh.H * (fp8 ? 1 : 2));
    if (fp8)
      for (std::size_t i = 0; i < b.size(); ++i) b[i] = fp8_of(in.x[i]);
    else
      std::memcpy(b.data(), in.x.data(), b.size());
    return b;
  };
  std::vector<std::uint8_t> x_bytes = payload(mine);
  std::vector<float> scales(static_cast<std::size_t>(T) * (sh.H / 128));
  for (int t = 0; t < T; ++t)
    for (int j = 0; j < sh.H / 128; ++j) scales[static_cast<std::size_t>(t) * (sh.H / 128) + j] = scale_of(me, t, j);
  auto* d_x = upload(x_bytes);
  auto* d_scales = upload(scales);
  auto* d_topk = upload(mine.topk);
  auto* d_w = upload(mine.weights);

  if (check_layout) {
    int *d_rank, *d_expert, *d_node;
    bool* d_in;
    NVST_CHECK_CUDA(cudaMalloc(&d_rank, R * sizeof(int)));
    NVST_CHECK_CUDA(cudaMalloc(&d_expert, sh.E * sizeof(int)));
    // Logical nodes of NVST_NODE_SIZE PEs: PE r is on node r / node_size.
    const int node_size = nvst::team_n_pes(nvst::Team::kNode), nodes = R / node_size;
    NVST_CHECK_CUDA(cudaMalloc(&d_node, nodes * sizeof(int)));
    NVST_CHECK_CUDA(cudaMalloc(&d_in, std::max(1, T * R)));
    nvst::ep::get_dispatch_layout(d_topk, T, sh.K, sh.E, {d_rank, d_node, d_expert, d_in}, s);
    NVST_CHECK_CUDA(cudaStreamSynchronize(s));
    auto rank = download(d_rank, R), expert = download(d_expert, sh.E), node = download(d_node, nodes);
    auto in = download(reinterpret_cast<const std::uint8_t*>(d_in), static_cast<std::size_t>(T) * R);
    std::vector<int> want_rank(R, 0), want_expert(sh.E, 0), want_node(nodes, 0);
    for (int t = 0; t < T; ++t) {
      std::vector<bool> any(nodes, false);
      for (int r = 0; r < R; ++r) {
        const bool g = goes_to(mine, t, sh.K, r, el);
        want_rank[r] += g;
        if (g) any[r / node_size] = true;
        err.add((in[static_cast<std::size_t>(t) * R + r] != 0) != g, "is_token_in_rank");
      }
      for (int n = 0; n < nodes; ++n) want_node[n] += any[n];
      for (int k = 0; k < sh.K; ++k)
        if (mine.topk[static_cast<std::size_t>(t) * sh.K + k] >= 0)
          ++want_expert[mine.topk[static_cast<std::size_t>(t) * sh.K + k]];
    }
    err.add(rank != want_rank, "num_tokens_per_rank");
    err.add(expert != want_expert, "num_tokens_per_expert");
    err.add(node != want_node, "num_tokens_per_node");
    for (void* p : {static_cast<void*>(d_rank), static_cast<void*>(d_expert), static_cast<void*>(d_node),
                    static_cast<void*>(d_in)})
      NVST_CHECK_CUDA(cudaFree(p));
  }

  nvst::ep::DispatchInput in;
  in.x = d_x;
  in.x_scales = fp8 ? d_scales : nullptr;
  in.topk_idx = d_topk;
  in.topk_weights = d_w;
  in.num_tokens = T;
  in.hidden = sh.H;
  in.num_topk = sh.K;
  in.num_experts = sh.E;
  in.x_type = fp8 ? XType::kFP8 : XType::kBF16;
  const std::vector<RecvRow> rows = expected_rows(all, me, sh.K, el);
  const std::size_t es = fp8 ? 1 : 2, row_bytes = sh.H * es, spr = sh.H / 128;

  auto check_recv = [&](const nvst::ep::DispatchOutput& out, const std::vector<std::vector<std::uint8_t>>& src_bytes,
                        const char* when) {
    err.add(out.num_recv_tokens != static_cast<int>(rows.size()), std::string(when) + ": num_recv_tokens " +
                                                                      std::to_string(out.num_recv_tokens) +
                                                                      " != " + std::to_string(rows.size()));
    if (out.num_recv_tokens != static_cast<int>(rows.size())) return;
    const std::size_t n = rows.size();
    auto x = download(static_cast<const std::uint8_t*>(out.recv_x), n * row_bytes);
    auto idx = download(out.recv_topk_idx, n * sh.K);
    auto w = download(out.recv_topk_weights, n * sh.K);
    auto src = download(out.recv_src_idx, n);
    std::vector<float> sc = fp8 ? download(out.recv_x_scales, n * spr) : std::vector<float>{};
    for (std::size_t i = 0; i < n; ++i) {
      const RecvRow rr = rows[i];
      const std::string at = std::string(when) + " row " + std::to_string(i) + " (PE " + std::to_string(rr.src) +
                             " token " + std::to_string(rr.token) + ")";
      err.add(std::memcmp(&x[i * row_bytes], &src_bytes[rr.src][static_cast<std::size_t>(rr.token) * row_bytes],
                          row_bytes) != 0,
              at + ": x");
      err.add(src[i] != rr.token, at + ": src_idx");
      for (int k = 0; k < sh.K; ++k) {
        const std::int64_t e = all[rr.src].topk[static_cast<std::size_t>(rr.token) * sh.K + k];
        const bool local = e >= 0 && e / el == me;
        err.add(idx[i * sh.K + k] != (local ? e - me * el : -1), at + ": topk_idx");
        err.add(w[i * sh.K + k] != (local ? all[rr.src].weights[static_cast<std::size_t>(rr.token) * sh.K + k] : 0.f),
                at + ": topk_weights");
      }
      for (std::size_t j = 0; fp8 && j < spr; ++j)
        err.add(sc[i * spr + j] != scale_of(rr.src, rr.token, static_cast<int>(j)), at + ": scale");
    }
  };

  std::vector<std::vector<std::uint8_t>> all_bytes;
  for (const auto& p : all) all_bytes.push_back(payload(p));
  nvst::ep::DispatchHandle handle;
  nvst::ep::DispatchOutput out = buf.dispatch(in, handle, cfg, s);
  if (queued_copy) {  // into pageable memory, as torch's .cpu()
    cudaEvent_t launched;
    std::vector<std::uint8_t> host(std::max<std::size_t>(16, TH * es));
    NVST_CHECK_CUDA(cudaEventCreateWithFlags(&launched, cudaEventDisableTiming));
    NVST_CHECK_CUDA(cudaEventRecord(launched, s));
    NVST_CHECK_CUDA(cudaStreamWaitEvent(cudaStreamLegacy, launched, 0));
    NVST_CHECK_CUDA(cudaMemcpyAsync(host.data(), d_x, TH * es, cudaMemcpyDeviceToHost, cudaStreamLegacy));
    NVST_CHECK_CUDA(cudaStreamSynchronize(cudaStreamLegacy));
    err.add(TH > 0 && std::memcmp(host.data(), x_bytes.data(), TH * es) != 0, "the queued copy of x");
    NVST_CHECK_CUDA(cudaEventDestroy(launched));
  }
  NVST_CHECK_CUDA(cudaStreamSynchronize(s));
  if (corrupt && out.num_recv_tokens > 0)
    NVST_CHECK_CUDA(cudaMemset(static_cast<char*>(out.recv_x) + row_bytes / 2, 0x5A, 1));
  check_recv(out, all_bytes, "dispatch");
  {  // received per local expert
    std::vector<int> want(el, 0);
    for (const RecvRow& rr : rows)
      for (int k = 0; k < sh.K; ++k) {
        const std::int64_t e = all[rr.src].topk[static_cast<std::size_t>(rr.token) * sh.K + k];
        if (e >= 0 && e / el == me) ++want[e - me * el];
      }
    err.add(handle.num_recv_tokens_per_expert != want, "num_recv_tokens_per_expert");
  }
  {  // per node: a token counts once for a node however many of its PEs it goes to
    const int G = nvst::team_n_pes(nvst::Team::kNode), N = R / G;
    err.add(handle.pes_per_node != G, "handle.pes_per_node");
    for (int p = 0; p < R; ++p) {
      int crossing = 0, flat = 0;
      for (int n = 0; n < N; ++n) {
        int tokens = 0;
        for (int t = 0; t < all[p].num_tokens; ++t) {
          bool in_node = false;
          for (int j = 0; j < G; ++j)
            if (goes_to(all[p], t, sh.K, n * G + j, el)) {
              in_node = true;
              if (n != p / G) ++flat;
            }
          tokens += in_node;
        }
        if (n != p / G) crossing += tokens;
        err.add(handle.node_count[static_cast<std::size_t>(p) * N + n] != tokens, "node_count");
      }
      err.add(handle.rows_to_other_nodes(p) != crossing || handle.rows_to_other_nodes_flat(p) != flat,
              "rows_to_other_nodes");
    }
  }

  // Again with the handle: new values, same routing, receive rows poisoned.
  for (auto& p : all)
    for (auto& v : p.x) v = expert_transform(v, 5);
  all_bytes.clear();
  for (const auto& p : all) all_bytes.push_back(payload(p));
  x_bytes = all_bytes[me];
  if (!x_bytes.empty()) NVST_CHECK_CUDA(cudaMemcpy(d_x, x_bytes.data(), x_bytes.size(), cudaMemcpyHostToDevice));
  if (!rows.empty()) NVST_CHECK_CUDA(cudaMemset(out.recv_x, 0xA5, rows.size() * row_bytes));
  NVST_CHECK_CUDA(cudaDeviceSynchronize());
  out = buf.dispatch(in, handle, cfg, s);
  NVST_CHECK_CUDA(cudaStreamSynchronize(s));
  check_recv(out, all_bytes, "dispatch with handle");

  // Combine: this PE's "expert" output for each received row.
  std::vector<std::uint16_t> y(rows.size() * sh.H);
  for (std::size_t i = 0; i < rows.size(); ++i)
    for (int v = 0; v < sh.H; ++v)
      y[i * sh.H + v] = expert_transform(all[rows[i].src].x[static_cast<std::size_t>(rows[i].token) * sh.H + v], me);
  // With fp8 rows the bias is a pair (DeepEP's), added in order.
  const bool bias_pair = bias && fp8;
  std::vector<std::uint16_t> bias_v, bias_v2;
  if (bias)
    for (std::size_t i = 0; i < TH; ++i) bias_v.push_back(bf16_bits(static_cast<float>(i % 13) * 0.125f - 0.5f));
  if (bias_pair)
    for (std::size_t i = 0; i < TH; ++i) bias_v2.push_back(bf16_bits(static_cast<float>(i % 7) * 0.375f - 1.0f));
  auto* d_y = upload(y);
  auto* d_bias = bias ? upload(bias_v) : nullptr;
  auto* d_bias2 = bias_pair ? upload(bias_v2) : nullptr;
  std::uint16_t* d_out = upload(std::vector<std::uint16_t>(TH, 0xFFFF));
  float* d_cw = upload(std::vector<float>(static_cast<std::size_t>(T) * sh.K, -7.f));
  nvst::ep::CombineInput cin{d_y, out.recv_topk_weights, d_bias, sh.H, d_bias2};
  buf.combine(cin, handle, {d_out, d_cw}, cfg, s);
  NVST_CHECK_CUDA(cudaStreamSynchronize(s));
  auto got = download(d_out, TH);
  auto got_w = download(d_cw, static_cast<std::size_t>(T) * sh.K);
  const int G = nvst::team_n_pes(nvst::Team::kNode);
  for (int t = 0; t < T; ++t) {
    for (int v = 0; v < sh.H; ++v) {
      float acc = normal_combine_expected(mine, t, v, sh.H, sh.K, el, me, R, G, expert_transform);
      if (bias) acc += bf16_value(bias_v[static_cast<std::size_t>(t) * sh.H + v]);
      if (bias_pair) acc += bf16_value(bias_v2[static_cast<std::size_t>(t) * sh.H + v]);
      err.add(got[static_cast<std::size_t>(t) * sh.H + v] != bf16_bits(acc),
              "combine token " + std::to_string(t) + " channel " + std::to_string(v));
    }
    for (int k = 0; k < sh.K; ++k) {
      const std::size_t tk = static_cast<std::size_t>(t) * sh.K + k;
      err.add(got_w[tk] != (mine.topk[tk] >= 0 ? mine.weights[tk] : 0.f),
              "combined_topk_weights token " + std::to_string(t));
    }
  }
  for (void* p : {static_cast<void*>(d_x), static_cast<void*>(d_scales), static_cast<void*>(d_topk),
                  static_cast<void*>(d_w), static_cast<void*>(d_y), static_cast<void*>(d_bias),
                  static_cast<void*>(d_bias2), static_cast<void*>(d_out), static_cast<void*>(d_cw)})
    NVST_CHECK_CUDA(cudaFree(p));
  return err;
}

// A model's layers: each a first dispatch (new routing, so no handle) and
// its combine, queued without waiting, the handle replaced while the last
// layer's combine may still run. Across nodes running kernels wait for the
// proxy, so nothing here may call into CUDA in a way that waits for the
// device (src/ep/handle_memory.hpp): `nvst bench ep` hung exactly so.
// The "expert" is the identity; every layer's result is checked at the end.
Errors first_dispatch_layers_case(nvst::ep::Buffer& buf, Shape sh, int layers, std::uint64_t seed,
                                  const nvst::ep::Config& cfg, cudaStream_t s) {
  const int me = nvst::my_pe(), R = nvst::n_pes(), el = sh.E / R, G = nvst::team_n_pes(nvst::Team::kNode);
  Errors err;
  std::vector<PeInput> mine;
  std::vector<std::uint16_t*> d_x, d_y, d_out;
  std::vector<std::int64_t*> d_topk;
  for (int l = 0; l < layers; ++l) {  // everything allocated before the first launch
    mine.push_back(
        make_pe_input(l % 2 ? RouteKind::kMasked : RouteKind::kRandom, me, sh.T, sh.H, sh.K, sh.E, seed + l));
    const std::size_t TH = static_cast<std::size_t>(mine[l].num_tokens) * sh.H;
    d_x.push_back(upload(mine[l].x));
    d_topk.push_back(upload(mine[l].topk));
    d_y.push_back(upload(std::vector<std::uint16_t>(TH * R, 0x7FC1)));  // at most every token from every PE
    d_out.push_back(upload(std::vector<std::uint16_t>(TH, 0xFFFF)));
  }
  nvst::ep::DispatchHandle h;
  for (int l = 0; l < layers; ++l) {
    h = nvst::ep::DispatchHandle{};  // gives the last layer's arrays back while its combine may run
    const nvst::ep::DispatchInput in{d_x[l], nullptr, d_topk[l], nullptr,      mine[l].num_tokens,
                                     sh.H,   sh.K,    sh.E,      XType::kBF16, 1};
    const nvst::ep::DispatchOutput out = buf.dispatch(in, h, cfg, s);
    if (out.num_recv_tokens > 0)
      NVST_CHECK_CUDA(cudaMemcpyAsync(d_y[l], out.recv_x, static_cast<std::size_t>(out.num_recv_tokens) * sh.H * 2,
                                      cudaMemcpyDeviceToDevice, s));
    buf.combine({d_y[l], nullptr, nullptr, sh.H}, h, {d_out[l], nullptr}, cfg, s);
  }
  NVST_CHECK_CUDA(cudaStreamSynchronize(s));
  const auto identity = [](std::uint16_t x, int) { return x; };
  for (int l = 0; l < layers; ++l) {
    const int T = mine[l].num_tokens;
    const auto got = download(d_out[l], static_cast<std::size_t>(T) * sh.H);
    for (int t = 0; t < T; ++t)
      for (int v = 0; v < sh.H; ++v)
        err.add(got[static_cast<std::size_t>(t) * sh.H + v] !=
                    bf16_bits(normal_combine_expected(mine[l], t, v, sh.H, sh.K, el, me, R, G, identity)),
                "layer " + std::to_string(l) + " token " + std::to_string(t) + " channel " + std::to_string(v));
  }
  for (int l = 0; l < layers; ++l)
    for (void* p : {static_cast<void*>(d_x[l]), static_cast<void*>(d_topk[l]), static_cast<void*>(d_y[l]),
                    static_cast<void*>(d_out[l])})
      NVST_CHECK_CUDA(cudaFree(p));
  return err;
}

// y = 2 x over n bf16 values: the "expert" of the CUDA-graph test.
__global__ void double_kernel(const __nv_bfloat16* x, __nv_bfloat16* y, std::size_t n) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    y[i] = __float2bfloat16(2.0f * __bfloat162float(x[i]));
}

float fp8_value(std::uint8_t b) {
  __nv_fp8_e4m3 f;
  f.__x = b;
  return static_cast<float>(f);
}

// Where scale j of row i of local expert e is, in bytes, in a low-latency
// receive buffer's scales: DeepEP's layout (column-major per expert; with
// UE8M0 four exponent bytes to an int32), written out here on its own.
std::size_t ll_scale_byte(bool ue8m0, int hidden, std::size_t rows_pe, int e, std::size_t i, int j) {
  if (ue8m0) return ((static_cast<std::size_t>(e) * (hidden / 512) + j / 4) * rows_pe + i) * 4 + j % 4;
  return ((static_cast<std::size_t>(e) * (hidden / 128) + j) * rows_pe + i) * 4;
}

// Options of a low-latency case beyond the route and shape.
enum class Logfmt { kNone, kAll, kOddPes };  // which PEs combine with use_logfmt
struct LlOptions {
  bool round_scale = false;
  bool ue8m0 = false;       // packed exponent scales (needs round_scale)
  bool wait_stats = false;  // pass wait_recv_cost_stats to both halves and check them
  Logfmt logfmt = Logfmt::kNone;
  bool fp16_combines = false;  // combine the dispatch twice more, of fp16 rows (check_fp16_combines)
};

// The "expert" of the LogFMT cases, for channel v of global expert g:
// magnitudes under 1 (compressed), except every fourth group of 128
// channels, scaled past 1 (sent as bf16), and an exact zero now and then.
bool logfmt_bf16_channel(int v) { return (v / nvst::ep::detail::kLogfmtGroup) % 4 == 3; }
std::uint16_t logfmt_expert(std::uint16_t x, std::int64_t g, int v) {
  if (v % 97 == 5) return 0;
  const float scale = logfmt_bf16_channel(v) ? 2.0f : 1.0f / 16;
  return bf16_bits(bf16_value(x) * static_cast<float>(g % 7 + 1) * scale);
}

// What a receiver gets of one row of `hidden` values sent as LogFMT: each
// group of 128 encoded and decoded by the kernels' own functions.
std::vector<float> logfmt_round_trip(const std::vector<float>& row) {
  using namespace nvst::ep::detail;
  std::vector<float> out(row.size());
  for (std::size_t g0 = 0; g0 < row.size(); g0 += kLogfmtGroup) {
    float amax = 0.0f, amin = INFINITY;
    for (std::size_t v = g0; v < g0 + kLogfmtGroup; ++v) logfmt_fold(row[v], amax, amin);
    const LogfmtRange r = logfmt_range(amax, amin);
    const LogfmtEncoder enc = r.step >= 0.0f ? logfmt_encoder(r) : LogfmtEncoder{};
    for (std::size_t v = g0; v < g0 + kLogfmtGroup; ++v)
      out[v] = r.step >= 0.0f ? logfmt_decode(logfmt_encode(row[v], enc), r) : row[v];
  }
  return out;
}

// The LogFMT combine on this PE against (a) the exact weighted sum: within
// 2.2 % of the sum of the terms' magnitudes plus bf16 rounding, and bit for
// bit in the bf16 groups; (b) the same sum over values round-tripped on the
// CPU: equal but for the rare value whose code the GPU's log2 puts one
// level over (at most 1 % of outputs). Some compressed output must differ
// from the exact sum, or nothing was compressed.
void check_logfmt_combine(Errors& err, const PeInput& mine, int T, int H, int K, int el, Logfmt mode,
                          const std::vector<std::uint16_t>& got) {
  long long compressed = 0, off_exact = 0, off_cpu = 0;
  std::vector<float> row(H), acc(H), exact(H), mag(H);
  for (int t = 0; t < T; ++t) {
    std::fill(acc.begin(), acc.end(), 0.0f);
    std::fill(exact.begin(), exact.end(), 0.0f);
    std::fill(mag.begin(), mag.end(), 0.0f);
    bool any_logfmt = false;
    for (int k = 0; k < K; ++k) {
      const std::size_t tk = static_cast<std::size_t>(t) * K + k;
      const std::int64_t e = mine.topk[tk];
      if (e < 0) continue;
      const float w = mine.weights[tk];
      for (int v = 0; v < H; ++v) row[v] = bf16_value(logfmt_expert(mine.x[static_cast<std::size_t>(t) * H + v], e, v));
      const bool sender_logfmt = mode == Logfmt::kAll || (e / el) % 2 == 1;
      any_logfmt |= sender_logfmt;
      const std::vector<float> sent = sender_logfmt ? logfmt_round_trip(row) : row;
      for (int v = 0; v < H; ++v) {
        acc[v] = std::fmaf(w, sent[v], acc[v]);
        exact[v] = std::fmaf(w, row[v], exact[v]);
        mag[v] += std::fabs(w * row[v]);
      }
    }
    for (int v = 0; v < H; ++v) {
      const std::uint16_t gb = got[static_cast<std::size_t>(t) * H + v];
      const float g = bf16_value(gb);
      const std::string at = "ll combine logfmt token " + std::to_string(t) + " channel " + std::to_string(v) +
                             ": got " + std::to_string(g) + ", exact " + std::to_string(exact[v]);
      if (logfmt_bf16_channel(v)) {
        err.add(gb != bf16_bits(exact[v]), at + " (a bf16 group must arrive unchanged)");
        continue;
      }
      err.add(!(std::fabs(g - exact[v]) <= mag[v] * 0.0223f + std::fabs(exact[v]) * (1.0f / 256) + 1e-6f),
              at + " (beyond LogFMT's 2.2 % bound)");
      if (!any_logfmt) continue;
      ++compressed;
      off_exact += gb != bf16_bits(exact[v]);
      off_cpu += gb != bf16_bits(acc[v]);
    }
  }
  err.add(compressed > 0 && off_exact == 0,
          "ll combine logfmt: no compressed output differs from the exact sum "
          "(was anything compressed?)");
  err.add(off_cpu > compressed / 100, "ll combine logfmt: " + std::to_string(off_cpu) + " of " +
                                          std::to_string(compressed) + " outputs differ from the CPU's LogFMT");
}

// The expert's row in the fp16 combines: the bf16 row's value scaled by
// 1 + 2^-10, so that it holds bits bf16 lacks.
std::uint16_t fp16_expert(std::uint16_t x, std::int64_t g) {
  return fp16_bits(bf16_value(expert_transform(x, static_cast<int>(g % 7))) * (1.0f + 1.0f / 1024));
}

// Two more combines of one dispatch, of fp16 rows (y16): to fp16 (the fp32
// sum rounded once) and to float32 (the sum itself), each bit for bit
// against ll_combine_sum.
void check_fp16_combines(Errors& err, nvst::ep::Buffer& buf, const PeInput& mine, const std::vector<std::uint16_t>& y16,
                         const std::int64_t* d_topk, const float* d_w, Shape sh, int buffer_index, bool split,
                         cudaStream_t s) {
  using nvst::ep::CombineType;
  using nvst::ep::Phase;
  const std::size_t n = static_cast<std::size_t>(mine.num_tokens) * sh.H;
  auto* d_y = upload(y16);
  auto* d_out = upload(std::vector<float>(n, NAN));
  auto value = [](std::uint16_t x, std::int64_t e) { return fp16_value(fp16_expert(x, e)); };
  std::vector<float> sum(n);
  for (int t = 0; t < mine.num_tokens; ++t)
    for (int v = 0; v < sh.H; ++v)
      sum[static_cast<std::size_t>(t) * sh.H + v] = ll_combine_sum(mine, t, v, sh.H, sh.K, value);
  for (const CombineType out_type : {CombineType::kFP16, CombineType::kFP32}) {
    nvst::ep::LowLatencyCombineInput cin{d_y, d_topk, d_w, mine.num_tokens, sh.H, sh.K, sh.E, buffer_index};
    cin.x_type = CombineType::kFP16;
    cin.out_type = out_type;
    buf.low_latency_combine(cin, d_out, s, split ? Phase::kSend : Phase::kBoth);
    if (split) buf.low_latency_combine(cin, d_out, s, Phase::kReceive);
    NVST_CHECK_CUDA(cudaStreamSynchronize(s));
    const bool f32 = out_type == CombineType::kFP32;
    const auto got = download(reinterpret_cast<const std::uint8_t*>(d_out), n * (f32 ? 4 : 2));
    long long wrong = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (f32) {
        float g;
        std::memcpy(&g, &got[i * 4], 4);
        wrong += !(g == sum[i]);
      } else {
        std::uint16_t g;
        std::memcpy(&g, &got[i * 2], 2);
        wrong += g != fp16_bits(sum[i]);
      }
    }
    err.add(wrong > 0, std::string("ll combine of fp16 rows to ") + (f32 ? "float32: " : "fp16: ") +
                           std::to_string(wrong) + " of " + std::to_string(n) + " values differ from the fp32 sum" +
                           (f32 ? "" : " rounded once"));
  }
  NVST_CHECK_CUDA(cudaFree(d_y));
  NVST_CHECK_CUDA(cudaFree(d_out));
}

// Low-latency dispatch, checked row by row (slots are claimed in any order,
// so rows are matched by their (PE, token, k)), then combine.
Errors ll_case(nvst::ep::Buffer& buf, RouteKind kind, Shape sh, bool fp8, bool split, std::uint64_t seed,
               cudaStream_t s, LlOptions opt = {}) {
  const int me = nvst::my_pe(), R = nvst::n_pes(), el = sh.E / R;
  const bool round_scale = opt.round_scale || opt.ue8m0;
  Errors err;
  const std::vector<PeInput> all = make_all_inputs(kind, R, sh.T, sh.H, sh.K, sh.E, seed);
  const PeInput& mine = all[me];
  const int T = mine.num_tokens;
  auto* d_x = upload(mine.x);
  auto* d_topk = upload(mine.topk);
  auto* d_w = upload(mine.weights);
  // Wait statistics: two arrays, so that the dispatch's and the combine's
  // are checked apart; they start at 2^40 (about 10 minutes of cycles), so
  // a kernel that stored its count instead of adding it would show.
  constexpr std::int64_t kWaitBase = std::int64_t{1} << 40;
  std::int64_t* d_wait = opt.wait_stats ? upload(std::vector<std::int64_t>(2 * R, kWaitBase)) : nullptr;
  nvst::ep::LowLatencyDispatchInput in{d_x, d_topk, T, sh.H, sh.K, sh.E, fp8, round_scale, opt.ue8m0, d_wait};
  using nvst::ep::Phase;
  nvst::ep::LowLatencyDispatchOutput out = buf.low_latency_dispatch(in, s, split ? Phase::kSend : Phase::kBoth);
  if (split) {  // other work between the halves, then the receive hook
    NVST_CHECK_CUDA(cudaMemsetAsync(d_w, 0, 0, s));
    out = buf.low_latency_dispatch(in, s, Phase::kReceive);
  }
  NVST_CHECK_CUDA(cudaStreamSynchronize(s));
  const std::size_t rows_pe = static_cast<std::size_t>(out.max_rows_per_expert);
  {  // The receive arrays lie in the low-latency block (DeepEP's RDMA buffer).
    const nvst::ep::Buffer::Region block = buf.local_ll_region();
    const auto* lo = static_cast<const char*>(block.ptr);
    auto inside = [&](const void* p, std::size_t bytes) {
      const auto* c = static_cast<const char*>(p);
      return lo != nullptr && c >= lo && c + bytes <= lo + block.bytes;
    };
    const std::size_t rows_all = el * rows_pe;
    err.add(!inside(out.recv_x, rows_all * sh.H * (fp8 ? 1 : 2)) || !inside(out.recv_src_info, rows_all * 12) ||
                (fp8 && !inside(out.recv_x_scales, rows_all * (sh.H / 128) * (opt.ue8m0 ? 1 : 4))),
            "ll receive arrays outside local_ll_region()");
  }
  auto count = download(out.recv_count, el);
  auto info = download(out.recv_src_info, el * rows_pe * 3);
  const std::size_t row_bytes = sh.H * (fp8 ? 1 : 2), spr = sh.H / 128;
  auto x = download(static_cast<const std::uint8_t*>(out.recv_x), el * rows_pe * row_bytes);
  // The scales as bytes: floats, or UE8M0 exponents, a quarter the size.
  const std::vector<std::uint8_t> sc =
      fp8 ? download(static_cast<const std::uint8_t*>(out.recv_x_scales), el * rows_pe * spr * (opt.ue8m0 ? 1 : 4))
          : std::vector<std::uint8_t>{};
  auto scale_of_row = [&](int e, std::size_t i, int j) {
    const std::size_t at = ll_scale_byte(opt.ue8m0, sh.H, rows_pe, e, i, j);
    if (opt.ue8m0) return std::ldexp(1.0f, static_cast<int>(sc[at]) - 127);
    float f;
    std::memcpy(&f, &sc[at], 4);
    return f;
  };
  std::vector<std::uint16_t> y(el * rows_pe * sh.H, 0), y16(y.size(), 0);
  for (int e = 0; e < el; ++e) {
    const int g = me * el + e;
    std::set<std::tuple<int, int, int>> want, seen;
    for (int p = 0; p < R; ++p)
      for (int t = 0; t < all[p].num_tokens; ++t)
        for (int k = 0; k < sh.K; ++k)
          if (all[p].topk[static_cast<std::size_t>(t) * sh.K + k] == g) want.insert({p, t, k});
    err.add(count[e] != static_cast<int>(want.size()), "ll recv_count expert " + std::to_string(e) + ": " +
                                                           std::to_string(count[e]) +
                                                           " != " + std::to_string(want.size()));
    for (int i = 0; i < std::min<int>(count[e], static_cast<int>(rows_pe)); ++i) {
      const std::size_t row = static_cast<std::size_t>(e) * rows_pe + i;
      const std::tuple<int, int, int> key{info[row * 3], info[row * 3 + 1], info[row * 3 + 2]};
      const std::string at = "ll expert " + std::to_string(e) + " slot " + std::to_string(i);
      if (!want.count(key) || seen.count(key)) {
        err.add(true, at + ": unexpected or repeated (PE, token, k)");
        continue;
      }
      seen.insert(key);
      const auto [p, t, k] = key;
      for (int v = 0; v < sh.H; ++v) {
        const std::uint16_t xb = all[p].x[static_cast<std::size_t>(t) * sh.H + v];
        if (fp8) {
          const float scale = scale_of_row(e, static_cast<std::size_t>(i), v / 128);
          int exp2 = 0;
          if (round_scale && v % 128 == 0) err.add(std::frexp(scale, &exp2) != 0.5f, at + ": scale not a power of two");
          const float deq = fp8_value(x[row * row_bytes + v]) * scale;
          const float ref = bf16_value(xb);
          err.add(std::fabs(deq - ref) > 0.0625f * std::fabs(ref) + scale * (1.f / 512) + 1e-6f,
                  at + ": fp8 value off by more than e4m3 rounding");
        } else {
          std::uint16_t got;
          std::memcpy(&got, &x[row * row_bytes + v * 2], 2);
          err.add(got != xb, at + ": x");
          y[row * sh.H + v] = opt.logfmt != Logfmt::kNone ? logfmt_expert(xb, g, v) : expert_transform(xb, g % 7);
          y16[row * sh.H + v] = fp16_expert(xb, g);
        }
      }
    }
  }
  // NVST_TEST_LL_BARRIER=1: no PE starts its combine before all checked
  // their dispatch (a probe for ordering problems, off by default).
  static const bool barrier_first = std::getenv("NVST_TEST_LL_BARRIER") != nullptr;
  if (barrier_first) nvst::barrier_all();
  if (!fp8) {  // combine: weighted sum over k, fused multiply-adds in k order
    auto* d_y = upload(y);
    std::uint16_t* d_out = upload(std::vector<std::uint16_t>(static_cast<std::size_t>(T) * sh.H, 0xFFFF));
    nvst::ep::LowLatencyCombineInput cin{
        d_y, d_topk, d_w, T, sh.H, sh.K, sh.E, out.buffer_index, d_wait ? d_wait + R : nullptr};
    cin.use_logfmt = opt.logfmt == Logfmt::kAll || (opt.logfmt == Logfmt::kOddPes && me % 2 == 1);
    buf.low_latency_combine(cin, d_out, s, split ? Phase::kSend : Phase::kBoth);
    if (split) buf.low_latency_combine(cin, d_out, s, Phase::kReceive);
    NVST_CHECK_CUDA(cudaStreamSynchronize(s));
    auto got = download(d_out, static_cast<std::size_t>(T) * sh.H);
    auto expert_out = [](std::uint16_t x, std::int64_t e) { return expert_transform(x, static_cast<int>(e % 7)); };
    if (opt.logfmt != Logfmt::kNone) check_logfmt_combine(err, mine, T, sh.H, sh.K, el, opt.logfmt, got);
    for (int t = 0; opt.logfmt == Logfmt::kNone && t < T; ++t)
      for (int v = 0; v < sh.H; ++v) {
        const std::uint16_t want = ll_combine_expected(mine, t, v, sh.H, sh.K, expert_out);
        const bool wrong = got[static_cast<std::size_t>(t) * sh.H + v] != want;
        if (wrong && err.bad == 0) {  // say which contributions could be missing
          std::string why = "ll combine token " + std::to_string(t) + " channel " + std::to_string(v) + " (buffer " +
                            std::to_string(out.buffer_index) + "): got " +
                            std::to_string(bf16_value(got[static_cast<std::size_t>(t) * sh.H + v])) + ", want " +
                            std::to_string(bf16_value(want)) + "; terms";
          for (int k = 0; k < sh.K; ++k) {
            const std::int64_t e = mine.topk[static_cast<std::size_t>(t) * sh.K + k];
            if (e < 0) continue;
            why += " e" + std::to_string(e) + "@PE" + std::to_string(e / el) + "=" +
                   std::to_string(mine.weights[static_cast<std::size_t>(t) * sh.K + k] *
                                  bf16_value(expert_transform(mine.x[static_cast<std::size_t>(t) * sh.H + v],
                                                              static_cast<int>(e % 7))));
          }
          err.add(true, why);
        } else {
          err.add(wrong, "ll combine token " + std::to_string(t));
        }
      }
    NVST_CHECK_CUDA(cudaFree(d_y));
    NVST_CHECK_CUDA(cudaFree(d_out));
    if (opt.fp16_combines) check_fp16_combines(err, buf, mine, y16, d_topk, d_w, sh, out.buffer_index, split, s);
  }
  if (d_wait) {  // every source PE's wait was counted (each wait takes at least a load's cycles)
    const auto wait = download(d_wait, 2 * R);
    for (int p = 0; p < R; ++p) {
      err.add(wait[p] <= kWaitBase, "ll dispatch wait_recv_cost_stats[" + std::to_string(p) +
                                        "] = " + std::to_string(wait[p]) + ": not added to");
      err.add(!fp8 && wait[R + p] <= kWaitBase, "ll combine wait_recv_cost_stats[" + std::to_string(p) +
                                                    "] = " + std::to_string(wait[R + p]) + ": not added to");
    }
    NVST_CHECK_CUDA(cudaFree(d_wait));
  }
  nvst::barrier_all();  // every PE has read its receive buffer before the next case
  NVST_CHECK_CUDA(cudaFree(d_x));
  NVST_CHECK_CUDA(cudaFree(d_topk));
  NVST_CHECK_CUDA(cudaFree(d_w));
  return err;
}

// Two low-latency micro-batches in flight: send a, send b, receive a,
// receive b (each receive names its buffer set); both get exactly their
// own rows (counted per expert and matched by (PE, token, k)).
Errors ll_two_batches_case(nvst::ep::Buffer& buf, Shape sh, cudaStream_t s) {
  const int me = nvst::my_pe(), R = nvst::n_pes(), el = sh.E / R;
  Errors err;
  using nvst::ep::Phase;
  std::vector<PeInput> all[2];
  std::vector<void*> to_free;
  nvst::ep::LowLatencyDispatchOutput out[2];
  for (int b = 0; b < 2; ++b) {
    all[b] = make_all_inputs(b ? RouteKind::kMasked : RouteKind::kRandom, R, sh.T - 7 * b, sh.H, sh.K, sh.E,
                             g_seed + 1000 + b);
    auto* d_x = upload(all[b][me].x);
    auto* d_topk = upload(all[b][me].topk);
    to_free.insert(to_free.end(), {d_x, d_topk});
    out[b] = buf.low_latency_dispatch({d_x, d_topk, all[b][me].num_tokens, sh.H, sh.K, sh.E, false}, s, Phase::kSend);
  }
  for (int b = 0; b < 2; ++b)
    buf.low_latency_dispatch({nullptr, nullptr, 0, sh.H, sh.K, sh.E, false}, s, Phase::kReceive, out[b].buffer_index);
  NVST_CHECK_CUDA(cudaStreamSynchronize(s));
  err.add(out[0].buffer_index == out[1].buffer_index, "two sends used the same buffer set");
  for (int b = 0; b < 2; ++b) {
    const std::size_t rows_pe = static_cast<std::size_t>(out[b].max_rows_per_expert);
    auto count = download(out[b].recv_count, el);
    auto info = download(out[b].recv_src_info, el * rows_pe * 3);
    for (int e = 0; e < el; ++e) {
      std::set<std::tuple<int, int, int>> want;
      for (int p = 0; p < R; ++p)
        for (int t = 0; t < all[b][p].num_tokens; ++t)
          for (int k = 0; k < sh.K; ++k)
            if (all[b][p].topk[static_cast<std::size_t>(t) * sh.K + k] == me * el + e) want.insert({p, t, k});
      err.add(count[e] != static_cast<int>(want.size()),
              "batch " + std::to_string(b) + " expert " + std::to_string(e) + ": count " + std::to_string(count[e]));
      for (int i = 0; i < std::min<int>(count[e], static_cast<int>(rows_pe)); ++i) {
        const std::size_t row = static_cast<std::size_t>(e) * rows_pe + i;
        err.add(!want.count({info[row * 3], info[row * 3 + 1], info[row * 3 + 2]}),
                "batch " + std::to_string(b) + ": a row of the other batch");
      }
    }
  }
  nvst::barrier_all();
  for (void* p : to_free) NVST_CHECK_CUDA(cudaFree(p));
  return err;
}

// Low latency under a CUDA graph: dispatch, an expert (y = 2x), combine;
// replayed with new x each time.
Errors ll_graph_case(nvst::ep::Buffer& buf, Shape sh, cudaStream_t s) {
  const int me = nvst::my_pe(), R = nvst::n_pes(), el = sh.E / R;
  Errors err;
  PeInput mine = make_pe_input(RouteKind::kMasked, me, sh.T, sh.H, sh.K, sh.E, g_seed + 77);
  const int T = mine.num_tokens;
  auto* d_x = upload(mine.x);
  auto* d_topk = upload(mine.topk);
  auto* d_w = upload(mine.weights);
  const std::size_t packed = static_cast<std::size_t>(el) * R * sh.T * sh.H;
  std::uint16_t* d_y = upload(std::vector<std::uint16_t>(packed, 0));
  std::uint16_t* d_out = upload(std::vector<std::uint16_t>(static_cast<std::size_t>(T) * sh.H, 0));
  cudaGraph_t g;
  cudaGraphExec_t exec;
  NVST_CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  auto out = buf.low_latency_dispatch({d_x, d_topk, T, sh.H, sh.K, sh.E, false}, s);
  double_kernel<<<64, 256, 0, s>>>(static_cast<const __nv_bfloat16*>(out.recv_x), reinterpret_cast<__nv_bfloat16*>(d_y),
                                   packed);
  buf.low_latency_combine({d_y, d_topk, d_w, T, sh.H, sh.K, sh.E, out.buffer_index}, d_out, s);
  NVST_CHECK_CUDA(cudaStreamEndCapture(s, &g));
  NVST_CHECK_CUDA(cudaGraphInstantiate(&exec, g, 0));
  for (int replay = 0; replay < 4; ++replay) {
    for (auto& v : mine.x) v = expert_transform(v, replay + 2);
    NVST_CHECK_CUDA(cudaMemcpy(d_x, mine.x.data(), mine.x.size() * 2, cudaMemcpyHostToDevice));
    NVST_CHECK_CUDA(cudaMemset(d_out, 0xFF, static_cast<std::size_t>(T) * sh.H * 2));
    NVST_CHECK_CUDA(cudaDeviceSynchronize());
    nvst::barrier_all();
    NVST_CHECK_CUDA(cudaGraphLaunch(exec, s));
    NVST_CHECK_CUDA(cudaStreamSynchronize(s));
    auto got = download(d_out, static_cast<std::size_t>(T) * sh.H);
    auto doubled = [](std::uint16_t x, std::int64_t) { return bf16_bits(2.f * bf16_value(x)); };
    for (int t = 0; t < T; ++t)
      for (int v = 0; v < sh.H; ++v)
        err.add(got[static_cast<std::size_t>(t) * sh.H + v] != ll_combine_expected(mine, t, v, sh.H, sh.K, doubled),
                "graph replay " + std::to_string(replay));
    nvst::barrier_all();
  }
  NVST_CHECK_CUDA(cudaGraphExecDestroy(exec));
  NVST_CHECK_CUDA(cudaGraphDestroy(g));
  for (void* p : {static_cast<void*>(d_x), static_cast<void*>(d_topk), static_cast<void*>(d_w), static_cast<void*>(d_y),
                  static_cast<void*>(d_out)})
    NVST_CHECK_CUDA(cudaFree(p));
  return err;
}

int run_pe() {
  nvst::init();
  const int me = nvst::my_pe(), R = nvst::n_pes();
  int passed = 0, failed = 0;
  auto check = [&](bool ok, const std::string& what) {
    // Every PE's verdict counts: a case fails if it failed anywhere.
    int mine_bad = ok ? 0 : 1;
    auto all = nvst::bootstrap_allgather(&mine_bad, sizeof(mine_bad));
    int bad_pes = 0;
    for (int p = 0; p < R; ++p) bad_pes += reinterpret_cast<const int*>(all.data())[p];
    if (!ok) std::printf("[PE %d] FAIL %s\n", me, what.c_str());
    if (me == 0) std::printf("%s %s\n", bad_pes ? "FAIL" : "PASS", what.c_str());
    (bad_pes ? failed : passed)++;
  };
  auto report = [&](const Errors& e, const std::string& what) {
    check(e.bad == 0, what + (e.bad ? ": " + std::to_string(e.bad) + " wrong, first " + e.first : std::string()));
  };
  cudaStream_t s;
  NVST_CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const Shape normal{96, 1024, 4, 8 * R};
  const Shape ll{64, 1024, 4, 4 * R};
  // Sized for the largest case below (200 tokens of hidden 2048, top-8).
  nvst::ep::Buffer buf(nvst::ep::Buffer::nvl_size_hint(R * 200, 2048, 8, XType::kBF16), ll.T, ll.H, ll.E, ll.K);
  nvst::ep::Config cfg;
  cfg.num_sms = 8;
  cfg.threads_per_block = 256;
  std::uint64_t salt = 0;
  for (RouteKind kind :
       {RouteKind::kRandom, RouteKind::kMasked, RouteKind::kNowhere, RouteKind::kOneExpert, RouteKind::kEmptyPe})
    for (bool fp8 : {false, true}) {
      const bool bias = kind == RouteKind::kMasked;
      report(normal_case(buf, kind, normal, fp8, bias, g_seed * 100 + ++salt, cfg, s, !fp8),
             std::string("normal ") + (fp8 ? "fp8" : "bf16") + ", " + route_name(kind) +
                 (bias ? (fp8 ? ", bias pair" : ", bias") : ""));
    }
  {
    nvst::ep::Config wide;  // other block shapes give the same answer
    wide.num_sms = 24;
    wide.threads_per_block = 1024;
    report(
        normal_case(buf, RouteKind::kRandom, {200, 2048, 8, 8 * R}, false, true, g_seed * 100 + ++salt, wide, s, false),
        "normal bf16, 24 x 1024 threads, hidden 2048, top-8, 200 tokens");
    // More rows from one PE to another than kCombineChunks chunks of 4:
    // the one-node combine's chunks grow to 5 rows (combine_chunk_rows).
    report(normal_case(buf, RouteKind::kOneExpert, {4500, 64, 2, 8 * R}, false, true, g_seed * 100 + ++salt,
                       nvst::ep::Config{}, s, false),
           "normal bf16, default Config, 4500 tokens of hidden 64 all to one expert (combine chunks of 5 rows)");
  }
  report(first_dispatch_layers_case(buf, normal, 8, g_seed * 100 + ++salt, cfg, s),
         "normal bf16, 8 layers of first dispatch + combine queued without waiting, the handle replaced each layer");
  // Across nodes the dispatch waits on the proxy while the copy holds the
  // driver: the data path must not need this process's driver (docs/09).
  report(normal_case(buf, RouteKind::kRandom, normal, false, false, g_seed * 100 + ++salt, cfg, s, false, false, true),
         "normal bf16, a copy to pageable memory queued behind the dispatch");
  {  // The checker itself: one flipped byte on every PE must be caught.
    Errors e = normal_case(buf, RouteKind::kRandom, normal, false, false, g_seed * 100 + ++salt, cfg, s, false, true);
    check(e.bad > 0, "the checker catches one corrupted received byte (" + std::to_string(e.bad) + " reported)");
  }
  for (RouteKind kind : {RouteKind::kRandom, RouteKind::kMasked, RouteKind::kOneExpert, RouteKind::kEmptyPe})
    for (bool fp8 : {false, true})
      for (bool split : {false, true})
        report(ll_case(buf, kind, ll, fp8, split, g_seed * 100 + ++salt, s, {.fp16_combines = true}),
               std::string("low latency ") + (fp8 ? "fp8" : "bf16 (and fp16 combines)") + ", " + route_name(kind) +
                   (split ? ", send/receive split" : ""));
  report(ll_case(buf, RouteKind::kRandom, ll, true, true, g_seed * 100 + ++salt, s, {.round_scale = true}),
         "low latency fp8, round_scale (power-of-two scales), send/receive split");
  for (bool split : {false, true})
    report(
        ll_case(buf, RouteKind::kRandom, ll, true, split, g_seed * 100 + ++salt, s, {.ue8m0 = true}),
        std::string("low latency fp8, UE8M0 scales (packed exponent bytes)") + (split ? ", send/receive split" : ""));
  for (bool split : {false, true})  // whole: the dispatch's last block and the combine's one kernel count them
    report(ll_case(buf, RouteKind::kMasked, ll, false, split, g_seed * 100 + ++salt, s, {.wait_stats = true}),
           std::string("low latency bf16, wait_recv_cost_stats of dispatch and combine") +
               (split ? ", send/receive split" : ""));
  for (RouteKind kind : {RouteKind::kRandom, RouteKind::kMasked})
    for (bool split : {false, true})
      report(ll_case(buf, kind, ll, false, split, g_seed * 100 + ++salt, s, {.logfmt = Logfmt::kAll}),
             std::string("low latency combine LogFMT, ") + route_name(kind) + (split ? ", send/receive split" : ""));
  // Whole calls: even PEs sum in their one bf16 kernel what odd PEs sent as LogFMT.
  for (bool split : {false, true})
    report(ll_case(buf, RouteKind::kRandom, ll, false, split, g_seed * 100 + ++salt, s, {.logfmt = Logfmt::kOddPes}),
           std::string("low latency combine LogFMT on odd PEs only (each sender's rows decoded as it sent them)") +
               (split ? ", send/receive split" : ""));
  {  // 65 groups of 128 channels: an odd count (a half-warp idle in the encoder's last round, the
     // receiver's last slice half active), more than 64 (the block encoder's second round, with
     // one group; the decoder's third ballot round), and rows longer than a block's one pass
     // in the dispatch (fp8: 520 units of 16 channels for 512 threads: a second pass in which
     // only 8 lanes of warp 0 work)
    const Shape odd{ll.T, 65 * 128, ll.K, ll.E};
    nvst::ep::Buffer odd_buf(0, odd.T, odd.H, odd.E, odd.K);
    for (bool split : {false, true})
      report(
          ll_case(odd_buf, RouteKind::kMasked, odd, false, split, g_seed * 100 + ++salt, s, {.logfmt = Logfmt::kAll}),
          std::string("low latency combine LogFMT, hidden 8320 (65 groups)") + (split ? ", send/receive split" : ""));
    report(ll_case(odd_buf, RouteKind::kRandom, odd, true, false, g_seed * 100 + ++salt, s),
           "low latency fp8, hidden 8320 (65 groups)");
  }
  {  // 300 experts a PE: the LogFMT send deals rows to blocks from a scan over the experts'
     // counts in chunks of 256 experts, so rows of the second chunk start where the first's end.
     // Top-24: the dispatch's far puts (across nodes) take a second round of the block's 16 warps.
    const Shape many{ll.T, 256, 24, 300 * R};
    nvst::ep::Buffer many_buf(0, many.T, many.H, many.E, many.K);
    report(
        ll_case(many_buf, RouteKind::kRandom, many, false, false, g_seed * 100 + ++salt, s, {.logfmt = Logfmt::kAll}),
        "low latency combine LogFMT, 300 experts a PE, top-24 (two chunks of the send's expert scan)");
    report(ll_case(many_buf, RouteKind::kMasked, many, true, true, g_seed * 100 + ++salt, s),
           "low latency fp8, 300 experts a PE, top-24, masked slots, send/receive split");
  }
  report(ll_graph_case(buf, ll, s), "low latency under a CUDA graph, 4 replays with new inputs");
  report(ll_two_batches_case(buf, ll, s), "low latency, two micro-batches in flight (send a, send b, receive a, b)");

  // Bad input: refused on every PE with a message, nothing hangs.
  {
    std::vector<std::uint16_t> x(static_cast<std::size_t>(ll.T + 1) * ll.H, 1);
    std::vector<std::int64_t> topk(static_cast<std::size_t>(ll.T + 1) * ll.K, 0);
    auto* d_x = upload(x);
    auto* d_topk = upload(topk);
    std::string m = error_of([&] { buf.low_latency_dispatch({d_x, d_topk, ll.T + 1, ll.H, ll.K, ll.E, true}, s); });
    check(m.find("at most") != std::string::npos, "low latency: too many tokens refused: " + m.substr(0, 90));
    m = error_of([&] {  // UE8M0 keeps only exponents: the scales must be powers of two
      nvst::ep::LowLatencyDispatchInput in{d_x, d_topk, 8, ll.H, ll.K, ll.E, true};
      in.use_ue8m0 = true;
      buf.low_latency_dispatch(in, s);
    });
    check(m.find("round_scale") != std::string::npos,
          "low latency: use_ue8m0 without round_scale refused: " + m.substr(0, 90));
    for (const bool logfmt : {true, false}) {  // LogFMT encodes bf16 rows; rows are 16-bit
      m = error_of([&] {
        nvst::ep::LowLatencyCombineInput cin{d_x, d_topk, nullptr, 0, ll.H, ll.K, ll.E, 0};
        cin.use_logfmt = logfmt;
        cin.x_type = logfmt ? nvst::ep::CombineType::kFP16 : nvst::ep::CombineType::kFP32;
        buf.low_latency_combine(cin, nullptr, s);
      });
      check(m.find(logfmt ? "use_logfmt" : "x_type") != std::string::npos,
            std::string("low latency: combine of ") + (logfmt ? "fp16 rows as LogFMT" : "float32 rows") +
                " refused: " + m.substr(0, 90));
    }
    m = error_of([&] {
      nvst::ep::DispatchHandle h;
      nvst::ep::DispatchInput in{reinterpret_cast<char*>(d_x) + 2, nullptr, d_topk, nullptr, 8, ll.H, ll.K, ll.E};
      buf.dispatch(in, h, cfg, s);
    });
    check(m.find("aligned") != std::string::npos, "dispatch: misaligned x refused: " + m.substr(0, 90));
    if (R > 1) {  // every count is a multiple of one PE
      m = error_of([&] {
        nvst::ep::DispatchHandle h;
        nvst::ep::DispatchInput in{d_x, nullptr, d_topk, nullptr, 8, ll.H, ll.K, 4 * R + 1};
        buf.dispatch(in, h, cfg, s);
      });
      check(m.find("multiple") != std::string::npos,
            "dispatch: experts not a multiple of PEs refused: " + m.substr(0, 90));
      // The count exchange carries each PE's shape: every PE is told, and
      // the exchange stays in step (the stress below dispatches afresh).
      const int odd_hidden = ll.H + (nvst::my_pe() == 0 ? 128 : 0);
      m = error_of([&] {
        nvst::ep::DispatchHandle h;
        nvst::ep::DispatchInput in{d_x, nullptr, d_topk, nullptr, 8, odd_hidden, ll.K, ll.E};
        buf.dispatch(in, h, cfg, s);
      });
      check(m.find("another hidden") != std::string::npos,
            "dispatch: PEs passing different shapes told on every PE: " + m.substr(0, 110));
    }
    m = error_of([&] {
      nvst::ep::Config bad;
      bad.num_sms = 100000;
      bad.validate();
    });
    check(m.find("num_sms") != std::string::npos, "Config: num_sms beyond the GPU refused: " + m.substr(0, 90));
    {
      nvst::ep::Buffer small(64 << 10);  // far too small for the rows below: every PE must refuse
      std::vector<std::int64_t> all_to_0(static_cast<std::size_t>(ll.T) * ll.K, -1);
      for (int t = 0; t < ll.T; ++t) all_to_0[static_cast<std::size_t>(t) * ll.K] = 0;
      auto* d_t0 = upload(all_to_0);
      m = error_of([&] {
        nvst::ep::DispatchHandle h;
        nvst::ep::DispatchInput in{d_x, nullptr, d_t0, nullptr, ll.T, ll.H, ll.K, ll.E};
        small.dispatch(in, h, cfg, s);
      });
      check(m.find("nvl_size_hint") != std::string::npos,
            "dispatch: rows beyond the buffer refused: " + m.substr(0, 110));
      NVST_CHECK_CUDA(cudaFree(d_t0));
    }
    NVST_CHECK_CUDA(cudaFree(d_x));
    NVST_CHECK_CUDA(cudaFree(d_topk));
  }

  // Stress: random routing, shapes and kinds, every iteration checked.
  if (g_stress > 0) {
    long long bad = 0;
    std::string first;
    std::mt19937_64 rng(g_seed * 31 + 5);  // the same on every PE: shapes agree
    for (int it = 0; it < g_stress; ++it) {
      const RouteKind kind = static_cast<RouteKind>(rng() % 5);
      const Shape sh{static_cast<int>(rng() % 49), 128, 1 + static_cast<int>(rng() % 4), 4 * R};
      Errors e = normal_case(buf, kind, sh, rng() % 2 == 0, rng() % 2 == 0, g_seed * 1000003 + it, cfg, s, false);
      if (e.bad && first.empty()) first = "iteration " + std::to_string(it) + ": " + e.first;
      bad += e.bad;
      if (me == 0 && (it + 1) % 1000 == 0)  // this PE's count so far: a cut-off run still says something
        std::printf("# stress %d/%d, %lld wrong on PE 0 so far\n", it + 1, g_stress, bad), std::fflush(stdout);
    }
    check(bad == 0, std::to_string(g_stress) + " iterations of random routing" +
                        (bad ? ": " + std::to_string(bad) + " wrong, first " + first : std::string()));
  }
  if (g_ll_stress > 0) {  // low latency, random kinds and split, combine checked (a quarter with LogFMT)
    long long bad = 0;
    std::string first;
    std::mt19937_64 rng(g_seed * 37 + 11);
    for (int it = 0; it < g_ll_stress; ++it) {
      const RouteKind kind = static_cast<RouteKind>(rng() % 5);
      const bool split = rng() % 2 == 0;
      const int tokens = 1 + static_cast<int>(rng() % ll.T);
      const Logfmt logfmt = rng() % 4 == 0 ? Logfmt::kAll : Logfmt::kNone;  // a quarter with LogFMT
      Errors e =
          ll_case(buf, kind, {tokens, ll.H, ll.K, ll.E}, false, split, g_seed * 7000003 + it, s, {.logfmt = logfmt});
      if (e.bad && first.empty()) first = "iteration " + std::to_string(it) + " (" + route_name(kind) + "): " + e.first;
      bad += e.bad;
    }
    check(bad == 0, std::to_string(g_ll_stress) + " low-latency iterations of random routing" +
                        (bad ? ": " + std::to_string(bad) + " wrong, first " + first : std::string()));
  }
  NVST_CHECK_CUDA(cudaStreamDestroy(s));
  nvst::barrier_all();
  if (me == 0) std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  int np = 2;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--np" && i + 1 < argc)
      np = std::atoi(argv[++i]);
    else if (a == "--seed" && i + 1 < argc)
      g_seed = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--stress" && i + 1 < argc)
      g_stress = std::atoi(argv[++i]);
    else if (a == "--ll-stress" && i + 1 < argc)
      g_ll_stress = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: %s --np N [--seed S] [--stress N] [--ll-stress N]\n", argv[0]);
      return 2;
    }
  }
  return run_gpu_test(argc, argv, "nvst_ep_tests", np, [] {
    const int rc = run_pe();
    nvst::finalize();
    return rc;
  });
}
