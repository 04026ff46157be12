// Collectives on host-memory PEs: see host_coll.hpp.
#include "coll/host_coll.hpp"

#include "coll/ring_layout.hpp"
#include "base/bootstrap.hpp"
#include "runtime/runtime_internal.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <iterator>
#include <string>
#include <type_traits>

namespace nvst::coll::internal {

namespace {
std::vector<HostWorkspace> g_host;  // by team handle
}  // namespace

void host_prepare(int handle, int npes, std::size_t chunk) {
  if (prepared(g_host, handle)) return;
  if (g_host.size() <= static_cast<std::size_t>(handle)) g_host.resize(static_cast<std::size_t>(handle) + 1);
  HostWorkspace w;
  w.generation = detail::init_generation();
  w.slot = slot_for(chunk, npes);
  for (int b = 0; b < 2; ++b) w.data[b] = static_cast<char*>(nvst::malloc(chunk));
  // Sized for the largest team, not this one: a team's size can differ
  // between PEs (split_2d's last row may be short), and every PE must
  // allocate the same bytes.
  constexpr std::size_t n = kMaxPes;
  w.flags = static_cast<std::uint64_t*>(nvst::calloc(5 * n, 8));
  w.vdata = w.flags + n;
  w.vack = w.flags + 2 * n;
  w.vlen = w.flags + 3 * n;
  w.vring = w.flags + 4 * n;
  w.chunk = chunk;
  w.vlen_src.assign(static_cast<std::size_t>(npes), 0);
  g_host[static_cast<std::size_t>(handle)] = std::move(w);
  nvst::barrier_all();
}

HostWorkspace& host_workspace(const char* fn, const TeamView& t) { return workspace_of(g_host, fn, t); }

namespace {

[[noreturn]] void mismatch(const HostCall& c, int p, std::uint32_t theirs) {
  // This PE's signals of this call must reach the others before it stops,
  // so they find the mismatch too rather than this PE gone.
  try {
    nvst::quiet();
  } catch (const Error&) {
  }
  const std::string why = call_mismatch_text(c.sig.fn, c.t.world_pe(p), theirs, c.t.world_pe(c.t.me), c.sig.bits(),
                                             c.sig.count, c.sig.root, c.t.handle);
  // The job cannot go on (the members' epochs differ): every PE hears why,
  // also one that has not read the odd member's flag yet.
  detail::runtime_bootstrap().report_failure(why);
  NVST_FAIL(why);
}

// This PE's call word for launch e, as member p's flags[me] hold it.
std::uint64_t call_word(const HostCall& c, std::uint64_t e) {
  return static_cast<std::uint64_t>(c.sig.bits()) << kEpochBits | e;
}

// Waits until member p's call word reaches launch e; one of launch e from
// another call stops this PE, naming both. A member already in its next
// call (epoch e + 1) has overwritten this one's bits; the others' check
// covers it.
void wait_call_word(const HostCall& c, int p, std::uint64_t e) {
  std::uint64_t v = std::atomic_ref<std::uint64_t>(c.w.flags[p]).load(std::memory_order_acquire);
  while ((v & kEpochMask) < e) v = nvst::signal_wait_until(&c.w.flags[p], nvst::Cmp::kNe, v);
  if ((v & kEpochMask) == e && (v >> kEpochBits) != c.sig.bits())
    mismatch(c, p, static_cast<std::uint32_t>(v >> kEpochBits));
}
}  // namespace

const char* host_exchange(const HostCall& c, const char* src, std::size_t stride, std::size_t bytes, int only_from,
                          int only_to) {
  const int me = c.t.me, n = c.t.npes;
  const std::uint64_t e = ++c.w.epoch;
  NVST_REQUIRE(e <= kEpochMask, "nvst::coll::", c.sig.fn, ": ", e, " host collectives on team ", c.t.handle,
               " are more than the epoch signal counts");
  const std::uint64_t signal = call_word(c, e);
  char* buf = c.w.data[e & 1];
  for (int p = 0; p < n; ++p)
    if (p != me)
      nvst::putmem_signal_nbi(buf + static_cast<std::size_t>(me) * c.w.slot, src + static_cast<std::size_t>(p) * stride,
                              (only_from < 0 || only_from == me) && (only_to < 0 || only_to == p) ? bytes : 0,
                              &c.w.flags[me], signal, nvst::SignalOp::kSet, c.t.world_pe(p));
  for (int p = 0; p < n; ++p)
    if (p != me) wait_call_word(c, p, e);
  nvst::quiet();  // `src` may be reused
  return buf;
}

namespace {

template <typename T>
T host_apply(T a, T b, RedOp op) {
  if constexpr (std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>) {
    const float x = static_cast<float>(a), y = static_cast<float>(b);
    if (op == RedOp::kSum) return static_cast<T>(x + y);
    if (op == RedOp::kProd) return static_cast<T>(x * y);
    return (op == RedOp::kMax ? x > y : x < y) ? a : b;
  } else if constexpr (std::is_integral_v<T>) {
    if (op == RedOp::kSum) return wrap_add(a, b);
    if (op == RedOp::kProd) return wrap_mul(a, b);
    return (op == RedOp::kMax ? a > b : a < b) ? a : b;
  } else {
    if (op == RedOp::kSum) return a + b;
    if (op == RedOp::kProd) return a * b;
    return (op == RedOp::kMax ? a > b : a < b) ? a : b;
  }
}

template <typename T>
void host_reduce(const HostCall& c, const T* in, const char* buf, T* out, std::size_t n, RedOp op) {
  auto contribution = [&](int p) {
    return p == c.t.me ? in : reinterpret_cast<const T*>(buf + static_cast<std::size_t>(p) * c.w.slot);
  };
  for (std::size_t i = 0; i < n; ++i) {
    T acc = contribution(0)[i];
    for (int p = 1; p < c.t.npes; ++p) acc = host_apply<T>(acc, contribution(p)[i], op);
    out[i] = acc;
  }
}

// Calls f(T{}) with T the element type of `dtype` (host code).
template <typename F>
void with_host_type(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kF32: f(float{}); break;
    case DType::kBF16: f(__nv_bfloat16{}); break;
    case DType::kF16: f(__half{}); break;
    case DType::kI32: f(std::int32_t{}); break;
    case DType::kI64: f(std::int64_t{}); break;
  }
}

void host_reduce_dtype(const HostCall& c, DType dtype, const char* own, const char* buf, char* out, std::size_t n,
                       RedOp op) {
  with_host_type(dtype, [&](auto zero) {
    using T = decltype(zero);
    host_reduce(c, reinterpret_cast<const T*>(own), buf, reinterpret_cast<T*>(out), n, op);
  });
}

// The ring on host-memory PEs, step for step as ring_kernel (one block, the
// sent segment staged in a local buffer that the end-of-slice quiet frees).
template <typename T>
void host_ring_combine(T* dst, T* out, const T* recv, const T* own, std::size_t n, RedOp op) {
  for (std::size_t i = 0; i < n; ++i) {
    const T x = recv ? (own ? host_apply<T>(recv[i], own[i], op) : recv[i]) : own[i];
    if (dst) dst[i] = x;
    if (out) out[i] = x;
  }
}

}  // namespace

void host_ring_all_reduce(const HostCall& c, const char* in, char* out, std::size_t count, DType dtype, RedOp op) {
  const int n = c.t.npes, me = c.t.me, left = (me + n - 1) % n, right_pe = c.t.world_pe((me + 1) % n);
  const int last = ring::steps(n);
  const std::size_t es = dtype_size(dtype), seg = ring::segment_elems(count, n, es);
  const std::size_t per = ring::slice_elems(c.w.chunk, n, es);
  std::vector<char> stage(static_cast<std::size_t>(std::max(1, last)) * per * es);
  for (std::size_t off = 0; off < seg; off += per) {
    const std::size_t region = std::min(per, seg - off) * es;
    const std::uint64_t e = ++c.w.epoch;
    char* buf = c.w.data[e & 1];
    // The call word rides to the right neighbour, which checks it (below).
    if (n > 1) nvst::signal_op(&c.w.flags[me], call_word(c, e), nvst::SignalOp::kSet, right_pe);
    for (int k = 0; k <= last; ++k) {
      const auto [from, to] = ring::step_span(me, k, n, count, seg, off, off + region / es);
      const char* recv = nullptr;
      if (k > 0) {
        nvst::signal_wait_until(&c.w.vring[left], nvst::Cmp::kGe, ring_value(e, k - 1));
        recv = buf + static_cast<std::size_t>(k - 1) * region;
      }
      char* dst = k < last ? stage.data() + static_cast<std::size_t>(k) * region : nullptr;
      with_host_type(dtype, [&](auto zero) {
        using T = decltype(zero);
        host_ring_combine<T>(reinterpret_cast<T*>(dst), k >= n - 1 ? reinterpret_cast<T*>(out) + from : nullptr,
                             reinterpret_cast<const T*>(recv),
                             k <= n - 1 ? reinterpret_cast<const T*>(in) + from : nullptr, to - from, op);
      });
      if (k < last)
        nvst::putmem_signal_nbi(buf + static_cast<std::size_t>(k) * region, dst, (to - from) * es, &c.w.vring[me],
                                ring_value(e, k), nvst::SignalOp::kSet, right_pe);
      // The left neighbour's word left before its step 0, which step 1
      // waits for anyway: checking it costs no extra trip.
      if (k == 0 && n > 1) wait_call_word(c, left, e);
    }
    nvst::quiet();  // the stage is refilled by the next slice
  }
}

// The reductions, as push_reduce on the GPU: part p of in (at p * stride)
// goes to member p (all_reduce: stride 0; reduce_scatter: stride = count
// elements), or to `dest` only (reduce), which alone reduces.
void host_push_reduce(const HostCall& c, const char* in, std::size_t stride, char* out, std::size_t count, DType dtype,
                      RedOp op, int dest) {
  const std::size_t es = dtype_size(dtype);
  const std::size_t slot = c.w.slot;
  for (std::size_t off = 0; off == 0 || off < count; off += slot / es) {  // once for 0
    const std::size_t n = std::min(slot / es, count - off);
    const char* base = in + off * es;
    const char* buf = host_exchange(c, base, stride, n * es, -1, dest);
    const char* own = base + static_cast<std::size_t>(c.t.me) * stride;
    if (dest < 0 || dest == c.t.me) host_reduce_dtype(c, dtype, own, buf, out + off * es, n, op);
  }
}

void host_broadcast(const HostCall& c, const char* in, char* out, std::size_t total, int root) {
  const std::size_t slot = c.w.slot;
  for (std::size_t off = 0; off == 0 || off < total; off += slot) {  // once for 0
    const std::size_t n = std::min(slot, total - off);
    const char* buf = host_exchange(c, in + off, 0, n, root);
    const char* src = c.t.me == root ? in + off : buf + static_cast<std::size_t>(root) * slot;
    if (n > 0 && src != out + off) std::memmove(out + off, src, n);
  }
}

// all_to_all: part p of in (in + p * in_stride) to member p; member p's part
// lands at out + p * total. all_gather is in_stride = 0.
void host_all_to_all(const HostCall& c, const char* in, std::size_t in_stride, char* out, std::size_t total) {
  const int me = c.t.me;
  const std::size_t slot = c.w.slot;
  for (std::size_t off = 0; off == 0 || off < total; off += slot) {  // once for 0
    const std::size_t n = std::min(slot, total - off);
    const char* buf = host_exchange(c, in + off, in_stride, n);
    for (int p = 0; p < c.t.npes && n > 0; ++p)
      std::memcpy(
          out + static_cast<std::size_t>(p) * total + off,
          p == me ? in + static_cast<std::size_t>(me) * in_stride + off : buf + static_cast<std::size_t>(p) * slot, n);
  }
}

// all_to_allv, as alltoallv_kernel: the usual exchange (every member is done
// with the slots), then each pair streams its message through the
// receiver's slot in rounds, flag and ack per round, the byte count first.
// Offsets and lengths in bytes.
void host_all_to_allv(const HostCall& c, const char* in, const std::size_t* send_off, const std::size_t* send_len,
                      char* out, const std::size_t* recv_off, const std::size_t* recv_len) {
  const int me = c.t.me, npes = c.t.npes;
  HostWorkspace& w = c.w;
  const std::size_t slot = w.slot;
  char* buf = const_cast<char*>(host_exchange(c, nullptr, 0, 0));
  const std::uint64_t e = w.epoch;
  auto rounds = [&](std::size_t len) { return len == 0 ? std::size_t{1} : (len + slot - 1) / slot; };
  auto value = [&](std::size_t k) { return (e << 24) | (k + 1); };
  if (send_len[me]) std::memmove(out + recv_off[me], in + send_off[me], send_len[me]);
  std::size_t all = 1;
  for (int p = 0; p < npes; ++p)
    if (p != me) all = std::max({all, rounds(send_len[p]), rounds(recv_len[p])});
  for (std::size_t k = 0; k < all; ++k) {
    for (int p = 0; p < npes; ++p) {
      if (p == me || k >= rounds(send_len[p])) continue;
      if (k > 0) nvst::signal_wait_until(&w.vack[p], nvst::Cmp::kGe, value(k - 1));
      if (k == 0) {
        w.vlen_src[static_cast<std::size_t>(p)] = send_len[p];
        nvst::putmem_nbi(&w.vlen[me], &w.vlen_src[static_cast<std::size_t>(p)], 8, c.t.world_pe(p));
        nvst::fence();  // the count before the flag
      }
      const std::size_t base = std::min(send_len[p], k * slot);
      nvst::putmem_signal_nbi(buf + static_cast<std::size_t>(me) * slot, in + send_off[p] + base,
                              std::min(send_len[p] - base, slot), &w.vdata[me], value(k), nvst::SignalOp::kSet,
                              c.t.world_pe(p));
    }
    for (int q = 0; q < npes; ++q) {
      if (q == me || k >= rounds(recv_len[q])) continue;
      nvst::signal_wait_until(&w.vdata[q], nvst::Cmp::kGe, value(k));
      NVST_REQUIRE(k > 0 || w.vlen[q] == recv_len[q], "nvst::coll::all_to_allv: PE ", c.t.world_pe(q), " sends ",
                   w.vlen[q], " bytes to PE ", c.t.world_pe(me), ", which expects ", recv_len[q],
                   " (recv_counts must equal the senders' send_counts)");
      const std::size_t base = std::min(recv_len[q], k * slot);
      std::memcpy(out + recv_off[q] + base, buf + static_cast<std::size_t>(q) * slot,
                  std::min(recv_len[q] - base, slot));
      nvst::signal_op(&w.vack[me], value(k), nvst::SignalOp::kSet, c.t.world_pe(q));
    }
  }
  nvst::quiet();  // `in` may be reused
}

}  // namespace nvst::coll::internal
