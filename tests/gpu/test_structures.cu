// The distributed hash map and ring buffer from kernels (DeviceOps), every
// PE's threads at once, against sequential models:
//  - hash map: each thread owns 16 keys and keeps their model (present,
//    value) in its registers; its random inserts, lookups and erases must
//    return what the model says, op by op, while all threads of all PEs also
//    insert 64 shared keys. Afterwards every thread's keys hold the model's
//    values, and no key is in two slots of its owner (checked on the host).
//  - ring buffer: 32 producer threads per PE push into PE 0's ring, whose
//    one consumer thread pops every item once, in each producer's order.
//    PE 0 runs its producers and the consumer as two kernels at once: both
//    are loaded before either starts (a kernel CUDA loads lazily would wait
//    for the spinning one). The ring holds 4096 items, so PEs time-sharing
//    one GPU hand over thousands of items per turn (ring_buffer.hpp); PE 0
//    prints the items popped every 10 s while the kernels run.
//   nvst_structure_tests --np N [--ops K]   (K: hash map ops and ring items
//   per PE, default 100000)
// Exits 77 (ctest: skipped) when fewer than N GPUs are visible
// (NVST_TEST_SHARE_GPUS=1 runs the PEs on one GPU).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "gpu_job.hpp"
#include "nvst/device.cuh"
#include "nvst/nvst.hpp"
#include "nvst/structures/device_ops.cuh"
#include "nvst/structures/hash_map.hpp"
#include "nvst/structures/ring_buffer.hpp"

namespace st = nvst::structures;
using st::DeviceOps;

namespace {

long long g_ops = 100000;
constexpr int kThreads = 128, kKeysPerThread = 16, kShared = 64;
constexpr int kProducers = 32;
constexpr std::uint64_t kRingCapacity = 4096;

__device__ std::uint64_t rnd(std::uint64_t& s) {
  s += 0x9e3779b97f4a7c15ull;
  return st::mix64(s);
}

__device__ std::uint64_t key_of(int pe, int tid, int j) {
  return (static_cast<std::uint64_t>(pe + 1) << 40) | (static_cast<std::uint64_t>(tid) << 8) |
         static_cast<std::uint64_t>(j);
}

// model_out[tid][j]: value + 1 when present, 0 when absent, for the check kernel.
__global__ void hash_hammer(st::HashMapView m, int me, long long ops_per_thread, unsigned long long* errors,
                            std::uint64_t* model_out) {
  const int tid = blockIdx.x * blockDim.x + threadIdx.x;
  std::uint64_t present = 0, value[kKeysPerThread] = {};
  std::uint64_t s = 12345 + static_cast<std::uint64_t>(me) * 1000003 + static_cast<std::uint64_t>(tid);
  for (long long i = 0; i < ops_per_thread; ++i) {
    const std::uint64_t r = rnd(s);
    const int j = static_cast<int>(r % kKeysPerThread);
    const std::uint64_t key = key_of(me, tid, j), bit = 1ull << j;
    switch ((r >> 8) % 10) {
      case 0:
      case 1:
      case 2:
      case 3: {
        const std::uint64_t v = rnd(s);
        const st::InsertResult got = st::hash_map_insert<DeviceOps>(m, key, v);
        const st::InsertResult want = (present & bit) ? st::InsertResult::kUpdated : st::InsertResult::kInserted;
        if (got != want) atomicAdd(errors, 1ull);
        present |= bit;
        value[j] = v;
        break;
      }
      case 4:
      case 5:
      case 6: {
        std::uint64_t v = 0;
        const bool found = st::hash_map_lookup<DeviceOps>(m, key, &v);
        if (found != ((present & bit) != 0) || (found && v != value[j])) atomicAdd(errors, 1ull);
        break;
      }
      case 7:
      case 8: {
        const bool erased = st::hash_map_erase<DeviceOps>(m, key);
        if (erased != ((present & bit) != 0)) atomicAdd(errors, 1ull);
        present &= ~bit;
        break;
      }
      default: {
        const st::InsertResult got = st::hash_map_insert<DeviceOps>(m, r % kShared, static_cast<std::uint64_t>(me));
        if (got == st::InsertResult::kFull) atomicAdd(errors, 1ull);
      }
    }
  }
  for (int j = 0; j < kKeysPerThread; ++j) model_out[tid * kKeysPerThread + j] = (present >> j & 1) ? value[j] + 1 : 0;
}

__global__ void hash_check(st::HashMapView m, int me, int n, const std::uint64_t* model, unsigned long long* errors) {
  const int tid = blockIdx.x * blockDim.x + threadIdx.x;
  for (int j = 0; j < kKeysPerThread; ++j) {
    std::uint64_t v = 0;
    const bool found = st::hash_map_lookup<DeviceOps>(m, key_of(me, tid, j), &v);
    const std::uint64_t want = model[tid * kKeysPerThread + j];
    if (found != (want != 0) || (found && v + 1 != want)) atomicAdd(errors, 1ull);
  }
  if (tid < kShared) {
    std::uint64_t v = 0;
    if (st::hash_map_lookup<DeviceOps>(m, static_cast<std::uint64_t>(tid), &v) && v >= static_cast<std::uint64_t>(n))
      atomicAdd(errors, 1ull);
  }
}

struct Item {
  unsigned long long producer, seq, check, pad;
};
__host__ __device__ unsigned long long check_of(unsigned long long p, unsigned long long s) {
  return (p * 0x9e3779b97f4a7c15ull) ^ (s * 31 + 5);
}

// progress[0]: items thread 0 pushed so far (mapped host memory, for the
// host's progress line).
__global__ void ring_produce(st::RingView r, int me, long long per_thread, unsigned long long* progress) {
  const int t = threadIdx.x;
  for (long long i = 0; i < per_thread; ++i) {
    const unsigned long long producer = static_cast<unsigned long long>(me) * kProducers + t;
    Item it{producer, static_cast<unsigned long long>(i), check_of(producer, i), 0};
    st::ring_push<DeviceOps>(r, 0, &it);
    if (t == 0) *reinterpret_cast<volatile unsigned long long*>(progress) = i + 1;
  }
}

// One thread: pops `total` items; next[p] is producer p's next seq;
// progress[1]: items popped so far.
__global__ void ring_consume(st::RingView r, long long total, int producers, unsigned long long* next,
                             unsigned long long* errors, unsigned long long* progress) {
  for (long long i = 0; i < total; ++i) {
    if ((i & 255) == 0) reinterpret_cast<volatile unsigned long long*>(progress)[1] = i;
    Item it{};
    st::ring_pop<DeviceOps>(r, &it);
    if (it.producer >= static_cast<unsigned long long>(producers) || it.check != check_of(it.producer, it.seq) ||
        it.seq != next[it.producer]) {
      atomicAdd(errors, 1ull);
      if (it.producer < static_cast<unsigned long long>(producers)) next[it.producer] = it.seq + 1;
      continue;
    }
    ++next[it.producer];
  }
  reinterpret_cast<volatile unsigned long long*>(progress)[1] = total;
}

// Polls `done` until the work before it has finished, printing progress()
// every 10 s: a run slowed by time slicing shows it moves, a stuck one where
// it stands. A kernel that failed (device timeout) makes the query throw
// with the device mailbox's message.
void wait_with_progress(const std::vector<cudaEvent_t>& done, const std::function<std::string(double)>& progress) {
  const auto start = std::chrono::steady_clock::now();
  auto next_report = start + std::chrono::seconds(10);
  for (std::size_t i = 0; i < done.size();) {
    const cudaError_t st = cudaEventQuery(done[i]);
    if (st == cudaSuccess) {
      ++i;
      continue;
    }
    if (st != cudaErrorNotReady) NVST_CHECK_CUDA(st);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    if (std::chrono::steady_clock::now() >= next_report) {
      next_report += std::chrono::seconds(10);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::printf("[PE %d] %s\n", nvst::my_pe(), progress(s).c_str());
    }
  }
}

long long all_sum(long long mine) {
  auto all = nvst::bootstrap_allgather(&mine, sizeof(mine));
  long long s = 0;
  for (int p = 0; p < nvst::n_pes(); ++p) {
    long long v;
    std::memcpy(&v, all.data() + p * sizeof(v), sizeof(v));
    s += v;
  }
  return s;
}

int pe_main() {
  nvst::init();
  const int me = nvst::my_pe(), n = nvst::n_pes();
  int failed = 0;
  auto report = [&](const char* what, long long errors, double ms) {
    const long long total = all_sum(errors);
    if (me == 0) std::printf("%s %s (%lld errors over all PEs, %.1f ms)\n", total ? "FAIL" : "PASS", what, total, ms);
    failed += total != 0;
  };
  unsigned long long* errors = nullptr;
  NVST_CHECK_CUDA(cudaMalloc(&errors, sizeof(*errors)));
  cudaEvent_t t0, t1;
  NVST_CHECK_CUDA(cudaEventCreate(&t0));
  NVST_CHECK_CUDA(cudaEventCreate(&t1));

  // ---- hash map ----
  {
    // Erased slots are not reused (hash_map.hpp): room for every insert of
    // an absent key, at most one per op, at a load that keeps probes short.
    const std::uint64_t capacity = 2 * static_cast<std::uint64_t>(g_ops) + 4 * kThreads * kKeysPerThread + 4 * kShared;
    auto* slots = static_cast<std::uint64_t*>(nvst::calloc(3 * capacity, 8));
    const st::HashMapView m{slots, capacity, n};
    std::uint64_t* model = nullptr;
    NVST_CHECK_CUDA(cudaMalloc(&model, sizeof(std::uint64_t) * kThreads * kKeysPerThread));
    NVST_CHECK_CUDA(cudaMemset(errors, 0, sizeof(*errors)));
    NVST_CHECK_CUDA(cudaDeviceSynchronize());
    const long long per_thread = (g_ops + kThreads - 1) / kThreads;
    const std::string what = "hash map: " + std::to_string(per_thread * kThreads) + " random ops per PE x " +
                             std::to_string(n) + " PEs = sequential model, no key twice";
    if (me == 0) std::printf("running %s\n", what.c_str());
    nvst::barrier_all();
    NVST_CHECK_CUDA(cudaEventRecord(t0));
    hash_hammer<<<kThreads / 64, 64>>>(m, me, per_thread, errors, model);
    NVST_CHECK_LAUNCH();
    NVST_CHECK_CUDA(cudaEventRecord(t1));
    wait_with_progress({t1}, [](double s) { return "hash map still running after " + std::to_string(int(s)) + " s"; });
    NVST_CHECK_CUDA(cudaDeviceSynchronize());
    float ms = 0;
    NVST_CHECK_CUDA(cudaEventElapsedTime(&ms, t0, t1));
    nvst::barrier_all();
    hash_check<<<kThreads / 64, 64>>>(m, me, n, model, errors);
    NVST_CHECK_LAUNCH();
    NVST_CHECK_CUDA(cudaDeviceSynchronize());
    unsigned long long e = 0;
    NVST_CHECK_CUDA(cudaMemcpy(&e, errors, sizeof(e), cudaMemcpyDeviceToHost));
    // No key twice among this PE's slots.
    std::vector<std::uint64_t> host(3 * capacity);
    NVST_CHECK_CUDA(cudaMemcpy(host.data(), slots, host.size() * 8, cudaMemcpyDeviceToHost));
    std::unordered_map<std::uint64_t, int> seen;
    for (std::uint64_t i = 0; i < capacity; ++i) {
      const std::uint64_t k = host[3 * i];
      if (k != st::kSlotEmpty && k != st::kSlotErased && ++seen[k] > 1) ++e;
    }
    report(what.c_str(), static_cast<long long>(e), ms);
    nvst::barrier_all();
    NVST_CHECK_CUDA(cudaFree(model));
    nvst::free(slots);
  }

  // ---- ring buffer ----
  {
    auto* words = static_cast<std::uint64_t*>(nvst::calloc(2 + kRingCapacity, 8));
    auto* data = static_cast<char*>(nvst::calloc(kRingCapacity, sizeof(Item)));
    const st::RingView r{words, words + 1, words + 2, data, kRingCapacity, sizeof(Item)};
    const long long per_thread = (g_ops + kProducers - 1) / kProducers;
    const int producers = n * kProducers;
    const long long total = per_thread * producers;
    unsigned long long* next = nullptr;
    NVST_CHECK_CUDA(cudaMalloc(&next, sizeof(unsigned long long) * producers));
    NVST_CHECK_CUDA(cudaMemset(next, 0, sizeof(unsigned long long) * producers));
    NVST_CHECK_CUDA(cudaMemset(errors, 0, sizeof(*errors)));
    unsigned long long* progress = nullptr;  // [pushed by thread 0, popped]
    NVST_CHECK_CUDA(cudaHostAlloc(&progress, 2 * sizeof(*progress), cudaHostAllocMapped));
    progress[0] = progress[1] = 0;
    cudaStream_t consume_stream, produce_stream;
    NVST_CHECK_CUDA(cudaStreamCreateWithFlags(&consume_stream, cudaStreamNonBlocking));
    NVST_CHECK_CUDA(cudaStreamCreateWithFlags(&produce_stream, cudaStreamNonBlocking));
    cudaEvent_t consumed;
    NVST_CHECK_CUDA(cudaEventCreateWithFlags(&consumed, cudaEventDisableTiming));
    // Loaded now: launching a kernel that CUDA has not loaded yet waits for
    // the running ones, and PE 0's consumer spins until its producers run.
    cudaFuncAttributes attr{};
    NVST_CHECK_CUDA(cudaFuncGetAttributes(&attr, ring_produce));
    NVST_CHECK_CUDA(cudaFuncGetAttributes(&attr, ring_consume));
    NVST_CHECK_CUDA(cudaDeviceSynchronize());
    const std::string what = "ring buffer: " + std::to_string(per_thread * kProducers) + " items per PE from " +
                             std::to_string(producers) + " producer threads into PE 0's ring of " +
                             std::to_string(kRingCapacity) + ", each once and in order";
    if (me == 0) std::printf("running %s\n", what.c_str());
    nvst::barrier_all();
    const auto wall0 = std::chrono::steady_clock::now();
    if (me == 0) {
      ring_consume<<<1, 1, 0, consume_stream>>>(r, total, producers, next, errors, progress);
      NVST_CHECK_LAUNCH();
    }
    NVST_CHECK_CUDA(cudaEventRecord(consumed, consume_stream));
    ring_produce<<<1, kProducers, 0, produce_stream>>>(r, me, per_thread, progress);
    NVST_CHECK_LAUNCH();
    NVST_CHECK_CUDA(cudaEventRecord(t1, produce_stream));
    wait_with_progress({t1, consumed}, [&](double s) {
      const unsigned long long pushed = reinterpret_cast<volatile unsigned long long*>(progress)[0];
      const unsigned long long popped = reinterpret_cast<volatile unsigned long long*>(progress)[1];
      std::string line = "ring buffer after " + std::to_string(static_cast<int>(s)) + " s: producer thread 0 pushed " +
                         std::to_string(pushed) + " of " + std::to_string(per_thread);
      if (me == 0) line += "; PE 0 popped " + std::to_string(popped) + " of " + std::to_string(total);
      return line;
    });
    NVST_CHECK_CUDA(cudaDeviceSynchronize());
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - wall0).count();
    unsigned long long e = 0;
    NVST_CHECK_CUDA(cudaMemcpy(&e, errors, sizeof(e), cudaMemcpyDeviceToHost));
    if (me == 0) {
      std::vector<unsigned long long> h(static_cast<std::size_t>(producers));
      NVST_CHECK_CUDA(cudaMemcpy(h.data(), next, h.size() * 8, cudaMemcpyDeviceToHost));
      for (auto v : h) e += v != static_cast<unsigned long long>(per_thread);
      std::uint64_t ends[2];
      NVST_CHECK_CUDA(cudaMemcpy(ends, words, sizeof(ends), cudaMemcpyDeviceToHost));
      e += ends[0] != ends[1] || ends[0] != static_cast<std::uint64_t>(total);
    }
    report(what.c_str(), static_cast<long long>(e), ms);
    nvst::barrier_all();
    NVST_CHECK_CUDA(cudaEventDestroy(consumed));
    NVST_CHECK_CUDA(cudaStreamDestroy(consume_stream));
    NVST_CHECK_CUDA(cudaStreamDestroy(produce_stream));
    NVST_CHECK_CUDA(cudaFreeHost(progress));
    NVST_CHECK_CUDA(cudaFree(next));
    nvst::free(data);
    nvst::free(words);
  }
  NVST_CHECK_CUDA(cudaFree(errors));
  nvst::finalize();
  if (me == 0) std::printf("%d failed\n", failed);
  return failed == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  int np = 2;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--np" || a == "--ops") && i + 1 < argc) {
      if (a == "--np")
        np = std::atoi(argv[++i]);
      else
        g_ops = std::atoll(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s --np N [--ops K]\n", argv[0]);
      return 2;
    }
  }
  if (np < 2 || g_ops < 1) {
    std::fprintf(stderr, "need --np >= 2 and --ops >= 1\n");
    return 2;
  }
  return nvst::test::run_gpu_test(argc, argv, "nvst_structure_tests", np, pe_main);
}
