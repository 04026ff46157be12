// Three PEs on this machine with their symmetric heaps in host memory, so
// it runs without a GPU: each puts its rank to the next PE with a signal,
// waits for its own, then all of them sum their ranks.
//   $ ./host_ring
//   PE 0 of 3: got 2 from PE 2, sum of ranks 3
//   ...
#include <cstdint>
#include <cstdio>

#include "nvst/coll.hpp"
#include "nvst/launch.hpp"
#include "nvst/nvst.hpp"

namespace {

int run_pe() {
  nvst::InitOptions options;
  options.heap_kind = nvst::HeapKind::kHost;
  nvst::init(options);
  const int me = nvst::my_pe(), n = nvst::n_pes();

  // Symmetric: the same offsets on every PE, so `slot` names the peer's too.
  auto* slot = static_cast<int*>(nvst::calloc(1, sizeof(int)));
  auto* sig = static_cast<std::uint64_t*>(nvst::calloc(1, sizeof(std::uint64_t)));
  nvst::barrier_all();  // every PE's slot is zero before anyone writes
  nvst::putmem_signal_nbi(slot, &me, sizeof(me), sig, 1, nvst::SignalOp::kSet, (me + 1) % n);
  nvst::signal_wait_until(sig, nvst::Cmp::kEq, 1);
  const int from = (me + n - 1) % n;

  int sum = me;
  nvst::coll::all_reduce(&sum, &sum, 1, nvst::coll::DType::kI32, nvst::coll::RedOp::kSum, nullptr);
  std::printf("PE %d of %d: got %d from PE %d, sum of ranks %d\n", me, n, *slot, from, sum);
  const bool ok = *slot == from && sum == n * (n - 1) / 2;

  nvst::free(sig);
  nvst::free(slot);
  nvst::finalize();
  return ok ? 0 : 1;
}

}  // namespace

int main() {
  try {
    if (nvst::is_pe_process()) return run_pe();
    nvst::SpawnOptions spawn;
    spawn.nprocs = 3;
    spawn.env = {{"NVST_HEAP", "host"}};
    return nvst::spawn_and_wait(spawn);
  } catch (const nvst::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
