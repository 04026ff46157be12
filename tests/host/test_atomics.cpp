// Remote atomics on host-memory PEs (through the proxy: the target's proxy
// applies them): every PE hammers words on every PE at once, and the results
// are checked against what a sequential execution allows.
//  - private words (one PE's own on each target): random ops of both widths,
//    each returned value equal to a sequential model's;
//  - shared counters under fetch_add and compare-and-swap increments: the
//    old values all PEs saw are exactly base, base + 1, ... (nothing lost,
//    nothing seen twice), 32-bit ones wrapping;
//  - a shared word under swap: the values returned plus the last one left are
//    the first one plus every value swapped in.
// NVST_ATOMIC_TEST_OPS scales the operations per PE (default a CI-sized 240).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "nvst/nvst.hpp"
#include "pe_harness.hpp"

using namespace nvst::test;

namespace {

constexpr int kPrivateWords = 4;
constexpr std::uint64_t kBase64 = (std::uint64_t{1} << 40) + 7;  // above 32 bits: a truncation shows
constexpr std::uint32_t kBase32 = 0xFFFFFF00u;                   // wraps after 256 adds

struct Words {
  std::uint64_t add64, cas64, swap64;
  std::uint32_t add32, cas32;
  std::uint64_t priv64[16][kPrivateWords];  // [source PE][word]
  std::uint32_t priv32[16][kPrivateWords];
};

int ops_per_pe() {
  const char* v = std::getenv("NVST_ATOMIC_TEST_OPS");
  return v ? std::max(1, std::atoi(v)) : 240;
}

// Old values seen per target, gathered from every PE: one fixed-size block
// per PE (count, then values), so bootstrap_allgather's sizes agree.
std::vector<std::uint64_t> gather_seen(const std::vector<std::vector<std::uint64_t>>& seen, int target, int n,
                                       std::size_t cap) {
  std::vector<std::uint64_t> mine(cap + 1, 0);
  const auto& s = seen[static_cast<std::size_t>(target)];
  mine[0] = s.size();
  std::copy(s.begin(), s.end(), mine.begin() + 1);
  auto all = nvst::bootstrap_allgather(mine.data(), mine.size() * 8);
  std::vector<std::uint64_t> out;
  for (int p = 0; p < n; ++p) {
    const auto* block = reinterpret_cast<const std::uint64_t*>(all.data()) + static_cast<std::size_t>(p) * (cap + 1);
    out.insert(out.end(), block + 1, block + 1 + block[0]);
  }
  return out;
}

int hammer(int me, int ops) {
  nvst::init();
  const int n = nvst::n_pes();
  auto* w = static_cast<Words*>(nvst::calloc(1, sizeof(Words)));
  w->add64 = kBase64;
  w->cas64 = kBase64;
  w->swap64 = 0xAAAA;  // the first value
  w->add32 = kBase32;
  w->cas32 = kBase32;
  nvst::barrier_all();

  std::mt19937_64 rng(1234 + static_cast<std::uint64_t>(me));
  std::uint64_t model64[16][kPrivateWords] = {};
  std::uint32_t model32[16][kPrivateWords] = {};
  // Per target: old values seen by this PE.
  std::vector<std::vector<std::uint64_t>> add64(n), add32(n), cas64(n), cas32(n), swapped_out(n), swapped_in(n);
  // A compare-and-swap increment, retried until it wins; returns the value it replaced.
  auto cas_increment = [](auto* word, int t) {
    for (int tries = 0;; ++tries) {
      if (tries == 10000) throw nvst::Error(nvst::detail::concat("compare_swap never won on PE ", t));
      const auto cur = nvst::atomic_fetch(word, t);
      if (nvst::atomic_compare_swap(word, cur, static_cast<decltype(cur)>(cur + 1), t) == cur) return cur;
    }
  };
  for (int i = 0; i < ops; ++i) {
    const int t = static_cast<int>(rng() % static_cast<std::uint64_t>(n));
    const int kind = static_cast<int>(rng() % 8);
    const int k = static_cast<int>(rng() % kPrivateWords);
    const std::uint64_t v = rng();
    switch (kind) {
      case 0: add64[t].push_back(nvst::atomic_fetch_add(&w->add64, std::uint64_t{1}, t)); break;
      case 1: add32[t].push_back(nvst::atomic_fetch_add(&w->add32, std::uint32_t{1}, t)); break;
      case 2: cas64[t].push_back(cas_increment(&w->cas64, t)); break;
      case 3: cas32[t].push_back(cas_increment(&w->cas32, t)); break;
      case 4: {
        const std::uint64_t mine = (static_cast<std::uint64_t>(me + 1) << 32) | static_cast<std::uint64_t>(i);
        swapped_in[t].push_back(mine);
        swapped_out[t].push_back(nvst::atomic_swap(&w->swap64, mine, t));
        break;
      }
      default: {  // this PE's private words on t: exactly the sequential model
        std::uint64_t& m64 = model64[t][k];
        std::uint32_t& m32 = model32[t][k];
        std::uint64_t* a64 = &w->priv64[me][k];
        std::uint32_t* a32 = &w->priv32[me][k];
        const int op = static_cast<int>(v % 4);
        const bool wide = (v >> 2) & 1;
        std::uint64_t got, want;
        if (wide) {
          want = m64;
          if (op == 0)
            got = nvst::atomic_fetch_add(a64, v, t), m64 += v;
          else if (op == 1) {
            const std::uint64_t cond = (v >> 3) & 1 ? m64 : m64 + 1;  // half the swaps succeed
            got = nvst::atomic_compare_swap(a64, cond, v, t);
            if (cond == m64) m64 = v;
          } else if (op == 2)
            got = nvst::atomic_swap(a64, v, t), m64 = v;
          else
            got = nvst::atomic_fetch(a64, t);
        } else {
          want = m32;
          const auto v32 = static_cast<std::uint32_t>(v >> 8);
          if (op == 0)
            got = nvst::atomic_fetch_add(a32, v32, t), m32 += v32;
          else if (op == 1) {
            const std::uint32_t cond = (v >> 3) & 1 ? m32 : m32 + 1;
            got = nvst::atomic_compare_swap(a32, cond, v32, t);
            if (cond == m32) m32 = v32;
          } else if (op == 2)
            got = nvst::atomic_swap(a32, v32, t), m32 = v32;
          else
            got = nvst::atomic_fetch(a32, t);
        }
        PE_EXPECT(got == want, "private word ", k, " on PE ", t, " (", wide ? 64 : 32, "-bit op ", op, ", op ", i,
                  "): got ", got, ", the sequential model says ", want);
      }
    }
  }
  nvst::barrier_all();

  // Each PE checks the shared words of its own heap against what all saw.
  const auto cap = static_cast<std::size_t>(ops);
  for (int t = 0; t < n; ++t) {
    auto a64 = gather_seen(add64, t, n, cap), a32 = gather_seen(add32, t, n, cap);
    auto c64 = gather_seen(cas64, t, n, cap), c32 = gather_seen(cas32, t, n, cap);
    auto out = gather_seen(swapped_out, t, n, cap), in = gather_seen(swapped_in, t, n, cap);
    if (t != me) continue;
    auto consecutive = [](std::vector<std::uint64_t> seen, std::uint64_t base, bool wide, std::uint64_t final_value,
                          const char* what) -> std::string {
      std::sort(seen.begin(), seen.end(), [&](std::uint64_t a, std::uint64_t b) {
        const std::uint64_t mask = wide ? ~0ull : 0xFFFFFFFFull;
        return ((a - base) & mask) < ((b - base) & mask);
      });
      const std::uint64_t mask = wide ? ~0ull : 0xFFFFFFFFull;
      for (std::size_t j = 0; j < seen.size(); ++j)
        if (seen[j] != ((base + j) & mask))
          return nvst::detail::concat(what, ": the ", j, "th old value is ", seen[j], ", not ", (base + j) & mask,
                                      " (an update lost or seen twice)");
      if (final_value != ((base + seen.size()) & mask))
        return nvst::detail::concat(what, ": ends at ", final_value, " after ", seen.size(), " updates from ", base);
      return "";
    };
    for (const std::string& err : {consecutive(a64, kBase64, true, w->add64, "fetch_add 64"),
                                   consecutive(a32, kBase32, false, w->add32, "fetch_add 32"),
                                   consecutive(c64, kBase64, true, w->cas64, "compare_swap 64"),
                                   consecutive(c32, kBase32, false, w->cas32, "compare_swap 32")})
      PE_EXPECT(err.empty(), err);
    out.push_back(w->swap64);
    in.push_back(0xAAAA);
    std::sort(out.begin(), out.end());
    std::sort(in.begin(), in.end());
    PE_EXPECT(out == in, "swap: the values returned plus the last one are not the first plus those swapped in (",
              out.size(), " against ", in.size(), ")");
  }
  nvst::barrier_all();
  nvst::free(w);
  nvst::finalize();
  return 0;
}

}  // namespace

TEST(RemoteAtomics, ThreePesHammeringMatchSequentialModel) {
  const int ops = ops_per_pe();
  auto res = run_pes(3, [ops](int me) { return hammer(me, ops); }, {}, 120);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(res[r].code(), 0) << "rank " << r;
}

// The inbox protocol's path (what GPU heaps use), with memcpy for copies.
TEST(RemoteAtomics, ThroughTheInboxPathToo) {
  const int ops = ops_per_pe() / 2;
  auto res = run_pes(2, [ops](int me) { return hammer(me, ops); }, {{"NVST_PROXY_INBOX", "1"}}, 120);
  for (int r = 0; r < 2; ++r) EXPECT_EQ(res[r].code(), 0) << "rank " << r;
}

TEST(RemoteAtomics, BadArgumentsAreNamed) {
  auto res = run_pes(2, [](int) {
    nvst::init();
    auto* w = static_cast<std::uint64_t*>(nvst::calloc(4, 8));
    std::uint64_t local = 0;
    const std::string off_heap = error_of([&] { nvst::atomic_fetch_add(&local, std::uint64_t{1}, 1); });
    PE_EXPECT(off_heap.find("atomic_fetch_add") != std::string::npos && off_heap.find("dest") != std::string::npos,
              "off-heap word: ", off_heap);
    auto* odd = reinterpret_cast<std::uint64_t*>(reinterpret_cast<char*>(w) + 4);
    const std::string misaligned = error_of([&] { nvst::atomic_swap(odd, std::uint64_t{1}, 1); });
    PE_EXPECT(misaligned.find("not aligned") != std::string::npos, "misaligned word: ", misaligned);
    const std::string bad_pe = error_of([&] { nvst::atomic_fetch(w, 7); });
    PE_EXPECT(bad_pe.find("atomic_fetch") != std::string::npos && bad_pe.find("7") != std::string::npos,
              "PE out of range: ", bad_pe);
    nvst::barrier_all();
    nvst::free(w);
    nvst::finalize();
    return 0;
  });
  for (int r = 0; r < 2; ++r) EXPECT_EQ(res[r].code(), 0) << "rank " << r;
}
