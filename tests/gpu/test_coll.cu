// Collectives against a CPU reference: all_reduce for every dtype x op x
// algorithm on random data (sizes 0, 1, odd, not multiples of 16 bytes or of
// the PE count, several workspace chunks), in place and out of place, and
// all_gather. The reference reduces in PE order (ring: in ring order from
// each segment's owner, src/coll/ring_layout.hpp) with the GPU's rounding
// (float adds, rounded to the element type at each step), so results must
// match bit for bit; that also proves every PE got the same answer.
// reduce_scatter for every dtype x op and broadcast from two roots too.
// all_to_all for every dtype (also at pointers that are not 16-byte
// aligned), all_to_allv on random layouts (zero counts, gaps whose poison
// must survive, one message of several slots), reduce for every dtype x op
// from two roots (other PEs' out untouched), and those three in a graph.
//   nvst_coll_tests --np 2 [--seed S]
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "coll_reference.cuh"
#include "gpu_job.hpp"
#include "nvst/coll.hpp"
#include "nvst/device.cuh"
#include "nvst/launch.hpp"
#include "nvst/nvst.hpp"

using nvst::coll::Algo;
using nvst::coll::DType;
using nvst::coll::RedOp;
using namespace nvst::test;

namespace {

std::uint64_t g_seed = 1;
bool g_only_hierarchical = false;  // --only hierarchical

__global__ void put_word_kernel(std::uint64_t* word, std::uint64_t v, int pe) { nvst::dev::p(word, v, pe); }

int run_pe() {
  nvst::init();
  const int me = nvst::my_pe(), n = nvst::n_pes();
  int passed = 0, failed = 0;
  auto check = [&](bool ok, const std::string& what) {
    // PE 0 reports every case; another PE speaks only when it failed one
    // (PE 0 may have passed it).
    if (me == 0 || !ok)
      std::printf("%s%s %s\n", me == 0 ? "" : ("[PE " + std::to_string(me) + "] ").c_str(), ok ? "PASS" : "FAIL",
                  what.c_str());
    (ok ? passed : failed)++;
  };
  nvst::coll::prepare();
  // The world spans logical nodes (NVST_NODE_SIZE): members of other nodes
  // are reached through the proxy, where twoshot (reads of peers' memory)
  // is refused with a message, checked once below.
  const bool cross = nvst::team_n_pes(nvst::Team::kNode) < n;
  auto refused = [&](const std::function<void()>& call, const std::string& what) {
    std::string m;
    try {
      call();
    } catch (const nvst::Error& e) {
      m = e.what();
    }
    check(m.find("nodes") != std::string::npos, what + " across nodes refused: " + m.substr(0, 120));
  };
  const std::size_t sizes[] = {0, 1, 7, 1000, 4097, 65536 + 3, (1u << 20) + 5, (5u << 20) + 11};
  std::size_t max_n = sizes[sizeof(sizes) / sizeof(sizes[0]) - 1];
  char *in = nullptr, *out = nullptr;
  NVST_CHECK_CUDA(cudaMalloc(&in, max_n * 8 + 64));
  NVST_CHECK_CUDA(cudaMalloc(&out, max_n * 8 * static_cast<std::size_t>(n) + 64));
  cudaStream_t s;
  NVST_CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::uint64_t salt = 0;
  const bool everything = !g_only_hierarchical;
  // --only hierarchical: just the hierarchical forms (a 2x2 run of everything on one GPU takes > 9 min).
  if (everything) {  // all_reduce, all_gather, reduce_scatter, broadcast
    for (DType t : kAllDTypes)
      for (RedOp op : kAllOps)
        for (Algo algo : {Algo::kLowLatency, Algo::kOneShot, Algo::kTwoShot, Algo::kRing})
          for (bool in_place : {false, true}) {
            if (cross && (algo == Algo::kTwoShot || algo == Algo::kLowLatency)) continue;
            long long bad = 0;
            std::string first;
            for (std::size_t count : sizes) {
              if (in_place && count > 70000) continue;  // in place: small and odd sizes suffice
              const std::size_t es = nvst::coll::dtype_size(t);
              ++salt;
              std::vector<std::vector<std::uint8_t>> inputs;
              for (int p = 0; p < n; ++p) inputs.push_back(make_input(t, count, p, salt, g_seed));
              // ring: each segment reduced from its owner on (ring_layout.hpp)
              std::vector<std::uint8_t> want =
                  algo == Algo::kRing ? ring_reduce_expected(t, op, inputs) : reduce_expected(t, op, inputs);
              char* dst = in_place ? in : out;
              if (count) NVST_CHECK_CUDA(cudaMemcpy(in, inputs[me].data(), count * es, cudaMemcpyHostToDevice));
              if (!in_place) NVST_CHECK_CUDA(cudaMemset(out, 0xA5, count * es + 64));
              NVST_CHECK_CUDA(cudaDeviceSynchronize());
              nvst::coll::all_reduce(in, dst, count, t, op, s, algo);
              NVST_CHECK_CUDA(cudaStreamSynchronize(s));
              std::vector<std::uint8_t> got(count * es + 64);
              NVST_CHECK_CUDA(cudaMemcpy(got.data(), dst, got.size(), cudaMemcpyDeviceToHost));
              long long b = 0;
              for (std::size_t i = 0; i < count * es; ++i) b += got[i] != want[i];
              if (!in_place)
                for (std::size_t i = count * es; i < got.size(); ++i) b += got[i] != 0xA5;  // nothing past the end
              if (b && first.empty()) first = " (first at count " + std::to_string(count) + ")";
              bad += b;
            }
            check(bad == 0, std::string("all_reduce ") + nvst::coll::dtype_name(t) + " " + nvst::coll::redop_name(op) +
                                " " + nvst::coll::algo_name(algo) + (in_place ? " in place" : "") +
                                (bad ? ": " + std::to_string(bad) + " bytes wrong" + first : ""));
          }
    for (std::size_t count : sizes) {
      ++salt;
      std::vector<std::vector<std::uint8_t>> inputs;
      for (int p = 0; p < n; ++p) inputs.push_back(make_input(DType::kBF16, count, p, salt, g_seed));
      if (count) NVST_CHECK_CUDA(cudaMemcpy(in, inputs[me].data(), count * 2, cudaMemcpyHostToDevice));
      NVST_CHECK_CUDA(cudaMemset(out, 0xA5, count * 2 * n + 64));
      NVST_CHECK_CUDA(cudaDeviceSynchronize());
      nvst::coll::all_gather(in, out, count, DType::kBF16, s);
      NVST_CHECK_CUDA(cudaStreamSynchronize(s));
      std::vector<std::uint8_t> got(count * 2 * n + 64);
      NVST_CHECK_CUDA(cudaMemcpy(got.data(), out, got.size(), cudaMemcpyDeviceToHost));
      long long bad = 0;
      for (int p = 0; p < n; ++p)
        for (std::size_t i = 0; i < count * 2; ++i) bad += got[p * count * 2 + i] != inputs[p][i];
      for (std::size_t i = count * 2 * n; i < got.size(); ++i) bad += got[i] != 0xA5;
      check(bad == 0, "all_gather bfloat16 count " + std::to_string(count) +
                          (bad ? ": " + std::to_string(bad) + " bytes wrong" : ""));
    }
    // reduce_scatter (every dtype x op) and broadcast (first and last root).
    for (DType t : kAllDTypes)
      for (RedOp op : kAllOps) {
        long long bad = 0;
        for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{4097}, std::size_t{65539},
                                  std::size_t{(1u << 20) + 5}}) {
          const std::size_t es = nvst::coll::dtype_size(t);
          if (count * es * n > max_n * 8) continue;
          ++salt;
          std::vector<std::vector<std::uint8_t>> inputs;
          for (int p = 0; p < n; ++p) inputs.push_back(make_input(t, count * n, p, salt, g_seed));
          std::vector<std::uint8_t> want(inputs[0].begin() + me * count * es,
                                         inputs[0].begin() + (me + 1) * count * es);
          for (int p = 1; p < n; ++p)
            for (std::size_t i = 0; i < count; ++i) combine(t, op, &want[i * es], &inputs[p][(me * count + i) * es]);
          if (count) NVST_CHECK_CUDA(cudaMemcpy(in, inputs[me].data(), count * n * es, cudaMemcpyHostToDevice));
          NVST_CHECK_CUDA(cudaMemset(out, 0xA5, count * es + 64));
          NVST_CHECK_CUDA(cudaDeviceSynchronize());
          nvst::coll::reduce_scatter(in, out, count, t, op, s);
          NVST_CHECK_CUDA(cudaStreamSynchronize(s));
          std::vector<std::uint8_t> got(count * es + 64);
          NVST_CHECK_CUDA(cudaMemcpy(got.data(), out, got.size(), cudaMemcpyDeviceToHost));
          for (std::size_t i = 0; i < count * es; ++i) bad += got[i] != want[i];
          for (std::size_t i = count * es; i < got.size(); ++i) bad += got[i] != 0xA5;
        }
        check(bad == 0, std::string("reduce_scatter ") + nvst::coll::dtype_name(t) + " " + nvst::coll::redop_name(op) +
                            (bad ? ": " + std::to_string(bad) + " bytes wrong" : ""));
      }
    for (int root : {0, n - 1}) {
      long long bad = 0;
      for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{4097}, std::size_t{(5u << 20) + 11}}) {
        ++salt;
        auto src = make_input(DType::kI32, count, root, salt, g_seed);
        if (count && me == root) NVST_CHECK_CUDA(cudaMemcpy(in, src.data(), count * 4, cudaMemcpyHostToDevice));
        NVST_CHECK_CUDA(cudaMemset(out, 0xA5, count * 4 + 64));
        NVST_CHECK_CUDA(cudaDeviceSynchronize());
        nvst::coll::broadcast(me == root ? in : nullptr, out, count, DType::kI32, root, s);
        NVST_CHECK_CUDA(cudaStreamSynchronize(s));
        std::vector<std::uint8_t> got(count * 4 + 64);
        NVST_CHECK_CUDA(cudaMemcpy(got.data(), out, got.size(), cudaMemcpyDeviceToHost));
        for (std::size_t i = 0; i < count * 4; ++i) bad += got[i] != src[i];
        for (std::size_t i = count * 4; i < got.size(); ++i) bad += got[i] != 0xA5;
      }
      check(bad == 0, "broadcast int32 from root " + std::to_string(root) +
                          (bad ? ": " + std::to_string(bad) + " bytes wrong" : ""));
    }
  }
  // all_to_all, all_to_allv and reduce on their own buffers (all_to_all's
  // largest case spans several workspace chunks).
  const std::size_t big_count = (5u << 20) + 11;
  const std::size_t big_bytes = big_count * 8 * static_cast<std::size_t>(n) + 64;
  char *b_in = nullptr, *b_out = nullptr;
  NVST_CHECK_CUDA(cudaMalloc(&b_in, big_bytes));
  NVST_CHECK_CUDA(cudaMalloc(&b_out, big_bytes));
  // Uploads `input` to b_in + in_off, fills b_out with 0xA5, runs `op`,
  // returns the bytes of b_out + out_off that differ from `want` (`want`'s
  // length, then 64 bytes of poison past it).
  auto run_case = [&](const std::vector<std::uint8_t>& input, std::size_t in_off, std::size_t out_off,
                      const std::vector<std::uint8_t>& want, const std::function<void(char*, char*)>& op) {
    if (!input.empty()) NVST_CHECK_CUDA(cudaMemcpy(b_in + in_off, input.data(), input.size(), cudaMemcpyHostToDevice));
    NVST_CHECK_CUDA(cudaMemset(b_out, 0xA5, std::min(big_bytes, out_off + want.size() + 64)));
    NVST_CHECK_CUDA(cudaDeviceSynchronize());
    op(b_in + in_off, b_out + out_off);
    NVST_CHECK_CUDA(cudaStreamSynchronize(s));
    std::vector<std::uint8_t> got(want.size() + 64);
    NVST_CHECK_CUDA(cudaMemcpy(got.data(), b_out + out_off, got.size(), cudaMemcpyDeviceToHost));
    long long bad = 0;
    for (std::size_t i = 0; i < got.size(); ++i) bad += got[i] != (i < want.size() ? want[i] : 0xA5);
    return bad;
  };
  if (everything) {  // all_to_all, all_to_allv, reduce, broadcast, graphs
    for (DType t : kAllDTypes)
      for (bool aligned : {true, false}) {
        const std::size_t es = nvst::coll::dtype_size(t);
        long long bad = 0;
        std::string first;
        for (std::size_t count :
             {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{4097}, std::size_t{65539}, big_count}) {
          if (!aligned && count > 70000) continue;
          ++salt;
          std::vector<std::vector<std::uint8_t>> inputs;
          for (int p = 0; p < n; ++p) inputs.push_back(make_input(t, count * n, p, salt, g_seed));
          const std::size_t off_in = aligned ? 0 : es, off_out = aligned ? 0 : 3 * es;
          const long long b = run_case(inputs[me], off_in, off_out, a2a_expected(me, inputs, count * es),
                                       [&](char* i, char* o) { nvst::coll::all_to_all(i, o, count, t, s); });
          if (b && first.empty()) first = " (first at count " + std::to_string(count) + ")";
          bad += b;
        }
        check(bad == 0, std::string("all_to_all ") + nvst::coll::dtype_name(t) + (aligned ? "" : " unaligned") +
                            (bad ? ": " + std::to_string(bad) + " bytes wrong" + first : ""));
      }
    if (cross) {
      refused([&] { nvst::coll::all_reduce(in, out, 100, DType::kF32, RedOp::kSum, s, Algo::kTwoShot); },
              "all_reduce twoshot");
      refused([&] { nvst::coll::all_reduce(in, out, 100, DType::kF32, RedOp::kSum, s, Algo::kLowLatency); },
              "all_reduce ll");
    } else {  // ll's lines carry 8 bytes: buffers off that alignment take the element-wise path
      for (DType t : {DType::kBF16, DType::kF32}) {
        const std::size_t es = nvst::coll::dtype_size(t);
        long long bad = 0;
        for (std::size_t count : {std::size_t{1}, std::size_t{7}, std::size_t{4097}}) {
          ++salt;
          std::vector<std::vector<std::uint8_t>> inputs;
          for (int p = 0; p < n; ++p) inputs.push_back(make_input(t, count, p, salt, g_seed));
          bad += run_case(inputs[me], es, 3 * es, reduce_expected(t, RedOp::kSum, inputs), [&](char* i, char* o) {
            nvst::coll::all_reduce(i, o, count, t, RedOp::kSum, s, Algo::kLowLatency);
          });
        }
        check(bad == 0, std::string("all_reduce ll ") + nvst::coll::dtype_name(t) + " unaligned" +
                            (bad ? ": " + std::to_string(bad) + " bytes wrong" : ""));
      }
    }
    for (DType t : kAllDTypes)
      for (std::size_t big : {std::size_t{0}, std::size_t{1}, big_count}) {
        if (t != DType::kF32 && big > 1) continue;
        const std::size_t es = nvst::coll::dtype_size(t);
        ++salt;
        const VLayout l = make_v_layout(n, salt, big == 1 ? 70000 : 40, big > 1 ? big : 0);
        std::vector<std::vector<std::uint8_t>> inputs;
        for (int p = 0; p < n; ++p) inputs.push_back(make_input(t, l.in_len[p], p, salt, g_seed));
        const auto rc = l.recv_counts(me);
        const long long bad = run_case(inputs[me], 0, 0, v_expected(l, me, inputs, es), [&](char* i, char* o) {
          nvst::coll::all_to_allv(i, l.counts[me], l.send_displs[me], o, rc, l.recv_displs[me], t, s);
        });
        check(bad == 0, std::string("all_to_allv ") + nvst::coll::dtype_name(t) + " layout " + std::to_string(salt) +
                            (big > 1 ? " with a message of several slots" : "") +
                            (bad ? ": " + std::to_string(bad) + " bytes wrong" : ""));
      }
    for (int root : {0, n - 1})
      for (DType t : kAllDTypes)
        for (RedOp op : kAllOps) {
          const std::size_t es = nvst::coll::dtype_size(t);
          long long bad = 0;
          for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{4097},
                                    std::size_t{(1u << 20) + 5}, big_count}) {
            if (count == big_count && (t != DType::kF32 || op != RedOp::kSum)) continue;
            ++salt;
            std::vector<std::vector<std::uint8_t>> inputs;
            for (int p = 0; p < n; ++p) inputs.push_back(make_input(t, count, p, salt, g_seed));
            std::vector<std::uint8_t> want = reduce_expected(t, op, inputs);
            if (me != root) want.assign(count * es, 0xA5);  // untouched off the root
            const std::size_t off = count == 7 ? es : 0;    // one case not 16-byte aligned
            bad += run_case(inputs[me], off, off, want, [&](char* i, char* o) {
              nvst::coll::reduce(i, me == root ? o : nullptr, count, t, op, root, s);
            });
          }
          check(bad == 0, std::string("reduce ") + nvst::coll::dtype_name(t) + " " + nvst::coll::redop_name(op) +
                              " root " + std::to_string(root) +
                              (bad ? ": " + std::to_string(bad) + " bytes wrong" : ""));
        }
    // all_to_all, all_to_allv and reduce captured in one graph, replayed with
    // new inputs (b_in: all_to_all's input, then the others').
    {
      const std::size_t count = 3001;
      const VLayout l = make_v_layout(n, 4242, 3000);
      const auto rc = l.recv_counts(me);
      const std::size_t a2a_bytes = count * 4 * n, v_in = a2a_bytes, r_in = v_in + (l.in_len[me] * 4 + 15) / 16 * 16;
      const std::size_t v_out = a2a_bytes, r_out = v_out + (l.out_len[me] * 4 + 15) / 16 * 16;
      cudaGraph_t g;
      cudaGraphExec_t exec;
      NVST_CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      nvst::coll::all_to_all(b_in, b_out, count, DType::kF32, s);
      nvst::coll::all_to_allv(b_in + v_in, l.counts[me], l.send_displs[me], b_out + v_out, rc, l.recv_displs[me],
                              DType::kF32, s);
      nvst::coll::reduce(b_in + r_in, b_out + r_out, count, DType::kI32, RedOp::kSum, n - 1, s);
      NVST_CHECK_CUDA(cudaStreamEndCapture(s, &g));
      NVST_CHECK_CUDA(cudaGraphInstantiate(&exec, g, 0));
      long long bad = 0;
      for (int replay = 0; replay < 3; ++replay) {
        ++salt;
        std::vector<std::vector<std::uint8_t>> a2a, v, r;
        for (int p = 0; p < n; ++p) {
          a2a.push_back(make_input(DType::kF32, count * n, p, salt, g_seed));
          v.push_back(make_input(DType::kF32, l.in_len[p], p, salt + 1, g_seed));
          r.push_back(make_input(DType::kI32, count, p, salt + 2, g_seed));
        }
        ++salt;
        std::vector<std::uint8_t> r_want = reduce_expected(DType::kI32, RedOp::kSum, r);
        if (me != n - 1) r_want.assign(count * 4, 0xA5);
        auto v_want = v_expected(l, me, v, 4);
        NVST_CHECK_CUDA(cudaMemcpy(b_in, a2a[me].data(), a2a_bytes, cudaMemcpyHostToDevice));
        if (!v[me].empty())
          NVST_CHECK_CUDA(cudaMemcpy(b_in + v_in, v[me].data(), v[me].size(), cudaMemcpyHostToDevice));
        NVST_CHECK_CUDA(cudaMemcpy(b_in + r_in, r[me].data(), count * 4, cudaMemcpyHostToDevice));
        NVST_CHECK_CUDA(cudaMemset(b_out, 0xA5, r_out + count * 4));
        NVST_CHECK_CUDA(cudaDeviceSynchronize());
        NVST_CHECK_CUDA(cudaGraphLaunch(exec, s));
        NVST_CHECK_CUDA(cudaStreamSynchronize(s));
        std::vector<std::uint8_t> got(r_out + count * 4);
        NVST_CHECK_CUDA(cudaMemcpy(got.data(), b_out, got.size(), cudaMemcpyDeviceToHost));
        auto a2a_want = a2a_expected(me, a2a, count * 4);
        for (std::size_t i = 0; i < a2a_bytes; ++i) bad += got[i] != a2a_want[i];
        for (std::size_t i = 0; i < v_want.size(); ++i) bad += got[v_out + i] != v_want[i];
        for (std::size_t i = 0; i < count * 4; ++i) bad += got[r_out + i] != r_want[i];
        nvst::barrier_all();  // every PE has read its output before the next inputs
      }
      NVST_CHECK_CUDA(cudaGraphExecDestroy(exec));
      NVST_CHECK_CUDA(cudaGraphDestroy(g));
      check(bad == 0, std::string("all_to_all, all_to_allv and reduce") + (cross ? " across nodes" : "") +
                          " in one CUDA graph, 3 replays with new inputs" +
                          (bad ? ": " + std::to_string(bad) + " bytes wrong" : std::string()));
    }
  }
  // The hierarchical all_reduce: each node's sum (in node order) reduced
  // across the nodes in order, for counts the node size does not divide,
  // in place and out of place (one node: the node's sum).
  {
    const int k = nvst::team_n_pes(nvst::Team::kNode);
    long long bad = 0;
    std::string first;
    for (DType t : {DType::kF32, DType::kBF16, DType::kI64})
      for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{4097}, std::size_t{(1u << 20) + 5}})
        for (bool in_place : {false, true}) {
          ++salt;
          std::vector<std::vector<std::uint8_t>> inputs, node_sums;
          for (int p = 0; p < n; ++p) inputs.push_back(make_input(t, count, p, salt, g_seed));
          for (int node = 0; node < n / k; ++node)
            node_sums.push_back(reduce_expected(
                t, RedOp::kSum,
                std::vector<std::vector<std::uint8_t>>(inputs.begin() + node * k, inputs.begin() + (node + 1) * k)));
          const long long b =
              run_case(inputs[me], 0, 0, reduce_expected(t, RedOp::kSum, node_sums), [&](char* i, char* o) {
                if (in_place)
                  NVST_CHECK_CUDA(
                      cudaMemcpyAsync(o, i, count * nvst::coll::dtype_size(t), cudaMemcpyDeviceToDevice, s));
                nvst::coll::all_reduce(in_place ? o : i, o, count, t, RedOp::kSum, s, Algo::kHierarchical);
              });
          if (b && first.empty())
            first = " (first: " + std::string(nvst::coll::dtype_name(t)) + " count " + std::to_string(count) + ")";
          bad += b;
        }
    check(bad == 0, "all_reduce hierarchical (" + std::to_string(n / k) + " nodes of " + std::to_string(k) + ")" +
                        (bad ? ": " + std::to_string(bad) + " bytes wrong" + first : std::string()));
  }
  // NVST_COLL_ALGO=hierarchical all_gather and reduce_scatter: across
  // nodes, column then node steps (node then column for reduce_scatter);
  // all_gather byte for byte, reduce_scatter each node's sum (in node
  // order) reduced across the nodes in order. On one node: the flat form,
  // whose PE-order sum is the same thing.
  {
    const int k = nvst::team_n_pes(nvst::Team::kNode);
    const char* was = std::getenv("NVST_COLL_ALGO");
    const std::string before = was ? was : "";
    setenv("NVST_COLL_ALGO", "hierarchical", 1);
    long long bad = 0;
    std::string first;
    for (DType t : {DType::kF32, DType::kBF16, DType::kI64})
      for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{4097}, std::size_t{(1u << 18) + 5}}) {
        const std::size_t es = nvst::coll::dtype_size(t), cb = count * es;
        ++salt;
        std::vector<std::vector<std::uint8_t>> parts;
        for (int p = 0; p < n; ++p) parts.push_back(make_input(t, count * n, p, salt, g_seed));
        std::vector<std::uint8_t> gathered;
        for (int p = 0; p < n; ++p) gathered.insert(gathered.end(), parts[p].begin(), parts[p].begin() + cb);
        long long b = run_case(std::vector<std::uint8_t>(parts[me].begin(), parts[me].begin() + cb), 0, 0, gathered,
                               [&](char* i, char* o) { nvst::coll::all_gather(i, o, count, t, s); });
        std::vector<std::vector<std::uint8_t>> node_sums;
        for (int node = 0; node < n / k; ++node) {
          std::vector<std::vector<std::uint8_t>> mine;
          for (int p = node * k; p < (node + 1) * k; ++p)
            mine.emplace_back(parts[p].begin() + me * cb, parts[p].begin() + (me + 1) * cb);
          node_sums.push_back(reduce_expected(t, RedOp::kSum, mine));
        }
        b += run_case(parts[me], 0, 0, reduce_expected(t, RedOp::kSum, node_sums),
                      [&](char* i, char* o) { nvst::coll::reduce_scatter(i, o, count, t, RedOp::kSum, s); });
        if (b && first.empty())
          first = " (first: " + std::string(nvst::coll::dtype_name(t)) + " count " + std::to_string(count) + ")";
        bad += b;
      }
    if (was)
      setenv("NVST_COLL_ALGO", before.c_str(), 1);
    else
      unsetenv("NVST_COLL_ALGO");
    check(bad == 0, "all_gather and reduce_scatter hierarchical (" + std::to_string(n / k) + " nodes of " +
                        std::to_string(k) + ")" +
                        (bad ? ": " + std::to_string(bad) + " bytes wrong" + first : std::string()));
  }
  // Teams: split_2d(world, 2) gives pairs of consecutive PEs (x) and the
  // PEs of the same parity (y); on 2 PEs, x is both and y is each PE alone.
  // Every collective on each team against the reference over its members
  // (team numbering for roots and parts), then all_reduce on x then y (the
  // hierarchical composition), a team barrier, and x and world all_reduces
  // interleaved in one graph (separate workspaces and epochs). A team that
  // spans logical nodes is refused with a message instead.
  if (everything) {  // teams
    {
      auto [x, y] = nvst::team_split_2d(nvst::Team::kWorld, 2);
      nvst::coll::prepare(x);
      nvst::coll::prepare(y);
      const int node_first = nvst::team_translate_pe(nvst::Team::kNode, 0);
      auto members = [](nvst::Team t) {
        std::vector<int> w;
        for (int i = 0; i < nvst::team_n_pes(t); ++i) w.push_back(nvst::team_translate_pe(t, i));
        return w;
      };
      auto on_my_node = [&](const std::vector<int>& w) {
        for (int p : w)
          if (p < node_first || p >= node_first + nvst::team_n_pes(nvst::Team::kNode)) return false;
        return true;
      };
      for (nvst::Team team : {x, y}) {
        const std::vector<int> w = members(team);
        // A team across nodes (every member sees one off its node) skips
        // what is refused there (twoshot).
        const bool team_cross = !on_my_node(w);
        const std::string tn = std::string(team == x ? "team x" : "team y") + (team_cross ? " across nodes" : "");
        const int tn_pes = static_cast<int>(w.size()), ti = nvst::team_my_pe(team);
        long long bad = 0;
        std::string first;
        auto note = [&](long long b, const std::string& what) {
          if (b && first.empty()) first = " (first: " + what + ")";
          bad += b;
        };
        for (DType t : {DType::kF32, DType::kBF16, DType::kI64})
          for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{4097}, std::size_t{(1u << 20) + 5}}) {
            const std::size_t es = nvst::coll::dtype_size(t);
            const std::string what = std::string(nvst::coll::dtype_name(t)) + " count " + std::to_string(count);
            ++salt;
            std::vector<std::vector<std::uint8_t>> tin, parts;
            for (int p : w) tin.push_back(make_input(t, count, p, salt, g_seed));
            for (int p : w) parts.push_back(make_input(t, count * tn_pes, p, salt + 7, g_seed));
            for (Algo algo : {Algo::kLowLatency, Algo::kOneShot, Algo::kTwoShot, Algo::kRing})
              if (!team_cross || (algo != Algo::kTwoShot && algo != Algo::kLowLatency))
                note(run_case(
                         tin[ti], 0, 0,
                         algo == Algo::kRing ? ring_reduce_expected(t, RedOp::kSum, tin)
                                             : reduce_expected(t, RedOp::kSum, tin),
                         [&](char* i, char* o) { nvst::coll::all_reduce(i, o, count, t, RedOp::kSum, s, algo, team); }),
                     std::string("all_reduce ") + nvst::coll::algo_name(algo) + " " + what);
            std::vector<std::uint8_t> gathered;
            for (auto& v : tin) gathered.insert(gathered.end(), v.begin(), v.end());
            note(run_case(tin[ti], 0, 0, gathered,
                          [&](char* i, char* o) { nvst::coll::all_gather(i, o, count, t, s, team); }),
                 "all_gather " + what);
            std::vector<std::vector<std::uint8_t>> mine_parts;
            for (auto& v : parts)
              mine_parts.emplace_back(v.begin() + ti * count * es, v.begin() + (ti + 1) * count * es);
            note(run_case(parts[ti], 0, 0, reduce_expected(t, RedOp::kMax, mine_parts),
                          [&](char* i, char* o) { nvst::coll::reduce_scatter(i, o, count, t, RedOp::kMax, s, team); }),
                 "reduce_scatter " + what);
            note(run_case(parts[ti], 0, 0, a2a_expected(ti, parts, count * es),
                          [&](char* i, char* o) { nvst::coll::all_to_all(i, o, count, t, s, team); }),
                 "all_to_all " + what);
            const int root = tn_pes - 1;
            note(run_case(tin[ti], 0, 0, tin[root],
                          [&](char* i, char* o) { nvst::coll::broadcast(i, o, count, t, root, s, team); }),
                 "broadcast " + what);
            std::vector<std::uint8_t> r_want =
                ti == 0 ? reduce_expected(t, RedOp::kMin, tin) : std::vector<std::uint8_t>(count * es, 0xA5);
            note(run_case(tin[ti], 0, 0, r_want,
                          [&](char* i, char* o) {
                            nvst::coll::reduce(i, ti == 0 ? o : nullptr, count, t, RedOp::kMin, 0, s, team);
                          }),
                 "reduce " + what);
          }
        ++salt;
        const VLayout l = make_v_layout(tn_pes, salt, 70000);
        std::vector<std::vector<std::uint8_t>> vin;
        for (int p = 0; p < tn_pes; ++p) vin.push_back(make_input(DType::kF32, l.in_len[p], w[p], salt, g_seed));
        const auto rc = l.recv_counts(ti);
        note(run_case(vin[ti], 0, 0, v_expected(l, ti, vin, 4),
                      [&](char* i, char* o) {
                        nvst::coll::all_to_allv(i, l.counts[ti], l.send_displs[ti], o, rc, l.recv_displs[ti],
                                                DType::kF32, s, team);
                      }),
             "all_to_allv");
        check(bad == 0, "every collective on " + tn + " (" + std::to_string(tn_pes) + " PEs)" +
                            (bad ? ": " + std::to_string(bad) + " bytes wrong" + first : ""));
      }
      {  // x then y: the hierarchical all_reduce
        long long bad = 0;
        for (DType t : {DType::kF32, DType::kBF16}) {
          const std::size_t count = 70001, es = nvst::coll::dtype_size(t);
          ++salt;
          std::vector<std::vector<std::uint8_t>> all_in;
          for (int p = 0; p < n; ++p) all_in.push_back(make_input(t, count, p, salt, g_seed));
          // x reduces pairs (2k, 2k+1) in order (with an odd count the last
          // PE is a pair alone); y then reduces, in order, the pair sums of
          // the PEs of this PE's parity. On an even count that is the world.
          auto pair_sum = [&](int p) {
            const int first = p - p % 2;
            return first + 1 < n ? reduce_expected(t, RedOp::kSum, {all_in[first], all_in[first + 1]}) : all_in[first];
          };
          std::vector<std::vector<std::uint8_t>> pair_sums;
          for (int p = me % 2; p < n; p += 2) pair_sums.push_back(pair_sum(p));
          const auto want = reduce_expected(t, RedOp::kSum, pair_sums);
          bad += run_case(all_in[me], 0, 0, want, [&](char* i, char* o) {
            nvst::coll::all_reduce(i, o, count, t, RedOp::kSum, s, Algo::kAuto, x);
            nvst::coll::all_reduce(o, o, count, t, RedOp::kSum, s, Algo::kAuto, y);
          });
          (void)es;
        }
        check(bad == 0, "all_reduce on x then y equals its pairs reduced in that order" +
                            (bad ? ": " + std::to_string(bad) + " bytes wrong" : std::string()));
      }
      {  // barrier(x): a peer's put from an earlier kernel is visible after it
        // (a store over NVLink; across nodes a command the proxy delivers
        // before the barrier's own signal)
        const int partner =  // a PE alone in its pair (1 PE, the last of an odd count) puts to itself
            nvst::team_n_pes(x) > 1 ? nvst::team_translate_pe(x, 1 - nvst::team_my_pe(x)) : me;
        auto* flag = static_cast<std::uint64_t*>(nvst::calloc(1, 8));
        const std::uint64_t v = 0xBA770000u + static_cast<std::uint64_t>(me);
        put_word_kernel<<<1, 1, 0, s>>>(flag, v, partner);
        NVST_CHECK_LAUNCH();
        nvst::coll::barrier(s, x);
        std::uint64_t got = 0;
        NVST_CHECK_CUDA(cudaMemcpyAsync(&got, flag, 8, cudaMemcpyDeviceToHost, s));
        NVST_CHECK_CUDA(cudaStreamSynchronize(s));
        check(got == 0xBA770000u + static_cast<std::uint64_t>(partner), "barrier on team x orders a peer's put");
        nvst::barrier_all();
        nvst::free(flag);
      }
    }
  }
  NVST_CHECK_CUDA(cudaFree(b_in));
  NVST_CHECK_CUDA(cudaFree(b_out));
  if (everything) {  // CUDA graphs and bad input
    // CUDA graphs: three all_reduces captured once, replayed with new inputs.
    {
      const std::size_t count = 3000;
      long long bad = 0;
      cudaGraph_t g;
      cudaGraphExec_t exec;
      NVST_CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      for (int k = 0; k < 3; ++k)
        nvst::coll::all_reduce(in, out, count, DType::kF32, RedOp::kSum, s,
                               k == 1 && !cross ? Algo::kTwoShot : Algo::kOneShot);
      NVST_CHECK_CUDA(cudaStreamEndCapture(s, &g));
      NVST_CHECK_CUDA(cudaGraphInstantiate(&exec, g, 0));
      for (int replay = 0; replay < 4; ++replay) {
        ++salt;
        std::vector<std::vector<std::uint8_t>> inputs;
        for (int p = 0; p < n; ++p) inputs.push_back(make_input(DType::kF32, count, p, salt, g_seed));
        std::vector<std::uint8_t> want = reduce_expected(DType::kF32, RedOp::kSum, inputs);
        NVST_CHECK_CUDA(cudaMemcpy(in, inputs[me].data(), count * 4, cudaMemcpyHostToDevice));
        NVST_CHECK_CUDA(cudaMemset(out, 0xA5, count * 4));
        NVST_CHECK_CUDA(cudaDeviceSynchronize());
        NVST_CHECK_CUDA(cudaGraphLaunch(exec, s));
        NVST_CHECK_CUDA(cudaStreamSynchronize(s));
        std::vector<std::uint8_t> got(count * 4);
        NVST_CHECK_CUDA(cudaMemcpy(got.data(), out, got.size(), cudaMemcpyDeviceToHost));
        for (std::size_t i = 0; i < got.size(); ++i) bad += got[i] != want[i];
        nvst::barrier_all();  // every PE has read its output before the next inputs
      }
      NVST_CHECK_CUDA(cudaGraphExecDestroy(exec));
      NVST_CHECK_CUDA(cudaGraphDestroy(g));
      check(bad == 0, "all_reduce under a CUDA graph, 4 replays with new inputs" +
                          (bad ? ": " + std::to_string(bad) + " bytes wrong" : std::string()));
    }
    // Bad input is refused with a message.
    std::string msg;
    try {
      nvst::coll::all_reduce(in + 1, out, 10, DType::kF32, RedOp::kSum, s);
    } catch (const nvst::Error& e) {
      msg = e.what();
    }
    check(msg.find("aligned") != std::string::npos, "misaligned buffer refused: " + msg.substr(0, 80));
  }
  NVST_CHECK_CUDA(cudaStreamDestroy(s));
  NVST_CHECK_CUDA(cudaFree(in));
  NVST_CHECK_CUDA(cudaFree(out));
  const char* heap = nvst::heap_kind_name(nvst::heap_kind());
  nvst::finalize();
  if (me == 0) std::printf("%d passed, %d failed (heap %s)\n", passed, failed, heap);
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
    else if (a == "--only" && i + 1 < argc && std::string(argv[i + 1]) == "hierarchical")
      g_only_hierarchical = true, ++i;
    else {
      std::fprintf(stderr, "usage: %s --np N [--seed S] [--only hierarchical]\n", argv[0]);
      return 2;
    }
  }
  return run_gpu_test(argc, argv, "nvst_coll_tests", np, run_pe);
}
