// CPU reference for the expert-parallel dispatch/combine tests: routings of
// several kinds, generated from a seed so that every PE can rebuild every
// PE's input, and what each PE must receive and get back.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace nvst::test {

enum class RouteKind {
  kRandom,     // num_topk distinct experts per token
  kMasked,     // random, about a quarter of the slots -1
  kNowhere,    // random, and every fourth token has no expert at all
  kOneExpert,  // every token of every PE to one expert (one PE receives all)
  kEmptyPe,    // random, and PE 1 has no tokens
};
inline const char* route_name(RouteKind k) {
  switch (k) {
    case RouteKind::kRandom: return "random";
    case RouteKind::kMasked: return "masked slots";
    case RouteKind::kNowhere: return "tokens to no PE";
    case RouteKind::kOneExpert: return "all tokens to one expert";
    case RouteKind::kEmptyPe: return "PE 1 has 0 tokens";
  }
  return "?";
}

// One PE's input: x (bf16 bits), topk_idx, topk_weights.
struct PeInput {
  int num_tokens = 0;
  std::vector<std::uint16_t> x;    // [T, H] bf16 bits, never all zero
  std::vector<std::int64_t> topk;  // [T, K]
  std::vector<float> weights;      // [T, K]
};

inline std::uint16_t bf16_bits(float f) { return static_cast<__nv_bfloat16_raw>(__float2bfloat16(f)).x; }
inline float bf16_value(std::uint16_t b) {
  __nv_bfloat16_raw r;
  r.x = b;
  return __bfloat162float(__nv_bfloat16(r));
}
inline std::uint16_t fp16_bits(float f) { return static_cast<__half_raw>(__float2half_rn(f)).x; }
inline float fp16_value(std::uint16_t b) {
  __half_raw r;
  r.x = b;
  return __half2float(__half(r));
}

inline PeInput make_pe_input(RouteKind kind, int pe, int num_tokens, int hidden, int num_topk, int num_experts,
                             std::uint64_t seed) {
  std::mt19937_64 rng(seed * 1000003u + static_cast<std::uint64_t>(pe) * 7919u + static_cast<std::uint64_t>(kind));
  PeInput in;
  in.num_tokens = (kind == RouteKind::kEmptyPe && pe == 1) ? 0 : num_tokens;
  const std::size_t T = static_cast<std::size_t>(in.num_tokens);
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  in.x.resize(T * hidden);
  for (auto& v : in.x) v = bf16_bits(u(rng) + 0.01f);
  in.topk.assign(T * num_topk, -1);
  in.weights.resize(T * num_topk);
  for (auto& w : in.weights) w = std::uniform_real_distribution<float>(0.05f, 1.f)(rng);
  std::vector<std::int64_t> experts(num_experts);
  for (std::size_t t = 0; t < T; ++t) {
    for (int e = 0; e < num_experts; ++e) experts[e] = e;
    for (int k = 0; k < num_topk; ++k) {  // partial Fisher-Yates: distinct experts
      const int j = k + static_cast<int>(rng() % static_cast<std::uint64_t>(num_experts - k));
      std::swap(experts[k], experts[j]);
      std::int64_t e = experts[k];
      if (kind == RouteKind::kMasked && rng() % 4 == 0) e = -1;
      if (kind == RouteKind::kNowhere && t % 4 == 3) e = -1;
      if (kind == RouteKind::kOneExpert) e = k == 0 ? num_experts - 1 : -1;
      in.topk[t * num_topk + k] = e;
    }
  }
  return in;
}

// Every PE's input (each PE rebuilds all of them to compute the reference).
inline std::vector<PeInput> make_all_inputs(RouteKind kind, int n_pes, int num_tokens, int hidden, int num_topk,
                                            int num_experts, std::uint64_t seed) {
  std::vector<PeInput> all;
  for (int p = 0; p < n_pes; ++p)
    all.push_back(make_pe_input(kind, p, num_tokens, hidden, num_topk, num_experts, seed));
  return all;
}

// Whether PE r owns one of token t's experts.
inline bool goes_to(const PeInput& in, int t, int num_topk, int r, int experts_per_pe) {
  for (int k = 0; k < num_topk; ++k) {
    const std::int64_t e = in.topk[static_cast<std::size_t>(t) * num_topk + k];
    if (e >= 0 && e / experts_per_pe == r) return true;
  }
  return false;
}

// A received row of the normal mode: which PE's which token.
struct RecvRow {
  int src, token;
};
// What PE r receives, in order: source PE by source PE, in token order.
inline std::vector<RecvRow> expected_rows(const std::vector<PeInput>& all, int r, int num_topk, int experts_per_pe) {
  std::vector<RecvRow> rows;
  for (int s = 0; s < static_cast<int>(all.size()); ++s)
    for (int t = 0; t < all[s].num_tokens; ++t)
      if (goes_to(all[s], t, num_topk, r, experts_per_pe)) rows.push_back({s, t});
  return rows;
}

// The "expert" the tests apply between dispatch and combine on PE r: every
// value times (r + 1) / 2, rounded to bf16 (exact arithmetic on the host).
inline std::uint16_t expert_transform(std::uint16_t x, int r) {
  return bf16_bits(bf16_value(x) * static_cast<float>(r + 1) * 0.5f);
}

// The normal combine of token t, channel v on PE `me`, in fp32 before
// bias: PE order; another node's PEs (nodes of pes_per_node) are summed on
// its relay first and rounded once to bf16 (DeepEP's hierarchical combine).
// expert_out(x bits, PE) is what PE r's expert made of the value.
template <typename ExpertOut>
float normal_combine_expected(const PeInput& in, int t, int v, int hidden, int num_topk, int experts_per_pe, int me,
                              int n_pes, int pes_per_node, ExpertOut expert_out) {
  const std::uint16_t xv = in.x[static_cast<std::size_t>(t) * hidden + v];
  float acc = 0;
  for (int n = 0; n < n_pes / pes_per_node; ++n) {
    float partial = 0;
    bool any = false;
    for (int r = n * pes_per_node; r < (n + 1) * pes_per_node; ++r) {
      if (!goes_to(in, t, num_topk, r, experts_per_pe)) continue;
      if (n == me / pes_per_node)
        acc += bf16_value(expert_out(xv, r));
      else
        partial += bf16_value(expert_out(xv, r)), any = true;
    }
    if (any) acc += bf16_value(bf16_bits(partial));
  }
  return acc;
}

// The low-latency combine of token t, channel v on its own PE, in fp32
// before rounding: sum over k (in order, -1 slots skipped) of w[t][k] * y,
// one fused multiply-add each, where y = expert_value(x bits, global
// expert) is what the expert made of the token's value.
template <typename ExpertValue>
float ll_combine_sum(const PeInput& in, int t, int v, int hidden, int num_topk, ExpertValue expert_value) {
  float acc = 0;
  for (int k = 0; k < num_topk; ++k) {
    const std::size_t tk = static_cast<std::size_t>(t) * num_topk + k;
    if (in.topk[tk] < 0) continue;
    acc = std::fmaf(in.weights[tk], expert_value(in.x[static_cast<std::size_t>(t) * hidden + v], in.topk[tk]), acc);
  }
  return acc;
}

// The same with bf16 rows (expert_out gives bf16 bits), as bf16 bits.
template <typename ExpertOut>
std::uint16_t ll_combine_expected(const PeInput& in, int t, int v, int hidden, int num_topk, ExpertOut expert_out) {
  return bf16_bits(ll_combine_sum(in, t, v, hidden, num_topk,
                                  [&](std::uint16_t x, std::int64_t e) { return bf16_value(expert_out(x, e)); }));
}

}  // namespace nvst::test
