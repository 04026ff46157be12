// The distributed hash map and ring buffer from kernels (DeviceOps), every
// PE's threads at once, against sequential models:
//  - hash map: each thread owns 16 keys and keeps their model (present,
//    value) in its registers; its random inserts, lookups and erases must
//    return what the model says, op by op, while all threads of all PEs also
//    insert 64 shared keys. Afterwards every thread's keys hold the model's
//    values, and no key is in two slots of its owner (checked on the host).
//  - ring buffer: 32 producer threads per PE push into PE 0's ring, whose
//    one consumer thread pops every item once, in each producer's order.
//   nvst_structure_tests --np N [--ops K]   (K: hash map ops and ring items
//   per PE, default 100000)
// Exits 77 (ctest: skipped) when fewer than N GPUs are visible
// (NVST_TEST_SHARE_GPUS=1 runs the PEs on one GPU).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
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
constexpr std::uint64_t kRingCapacity = 1024;

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

__global__ void ring_produce(st::RingView r, int me, long long per_thread) {
  const int t = threadIdx.x;
  for (long long i = 0; i < per_thread; ++i) {
    const unsigned long long producer = static_cast<unsigned long long>(me) * kProducers + t;
    Item it{producer, static_cast<unsigned long long>(i), check_of(producer, i), 0};
    st::ring_push<DeviceOps>(r, 0, &it);
  }
}

// One thread: pops `total` items; next[p] is producer p's next seq.
__global__ void ring_consume(st::RingView r, long long total, int producers, unsigned long long* next,
                             unsigned long long* errors) {
  for (long long i = 0; i < total; ++i) {
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
    nvst::barrier_all();
    const long long per_thread = (g_ops + kThreads - 1) / kThreads;
    NVST_CHECK_CUDA(cudaEventRecord(t0));
    hash_hammer<<<kThreads / 64, 64>>>(m, me, per_thread, errors, model);
    NVST_CHECK_LAUNCH();
    NVST_CHECK_CUDA(cudaEventRecord(t1));
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
    const std::string what = "hash map: " + std::to_string(per_thread * kThreads) + " random ops per PE x " +
                             std::to_string(n) + " PEs = sequential model, no key twice";
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
    unsigned long long* next = nullptr;
    NVST_CHECK_CUDA(cudaMalloc(&next, sizeof(unsigned long long) * producers));
    NVST_CHECK_CUDA(cudaMemset(next, 0, sizeof(unsigned long long) * producers));
    NVST_CHECK_CUDA(cudaMemset(errors, 0, sizeof(*errors)));
    cudaStream_t consume_stream, produce_stream;
    NVST_CHECK_CUDA(cudaStreamCreateWithFlags(&consume_stream, cudaStreamNonBlocking));
    NVST_CHECK_CUDA(cudaStreamCreateWithFlags(&produce_stream, cudaStreamNonBlocking));
    NVST_CHECK_CUDA(cudaDeviceSynchronize());
    nvst::barrier_all();
    NVST_CHECK_CUDA(cudaEventRecord(t0, produce_stream));
    if (me == 0) {
      ring_consume<<<1, 1, 0, consume_stream>>>(r, per_thread * producers, producers, next, errors);
      NVST_CHECK_LAUNCH();
    }
    ring_produce<<<1, kProducers, 0, produce_stream>>>(r, me, per_thread);
    NVST_CHECK_LAUNCH();
    NVST_CHECK_CUDA(cudaEventRecord(t1, produce_stream));
    NVST_CHECK_CUDA(cudaDeviceSynchronize());
    float ms = 0;
    NVST_CHECK_CUDA(cudaEventElapsedTime(&ms, t0, t1));
    unsigned long long e = 0;
    NVST_CHECK_CUDA(cudaMemcpy(&e, errors, sizeof(e), cudaMemcpyDeviceToHost));
    if (me == 0) {
      std::vector<unsigned long long> h(static_cast<std::size_t>(producers));
      NVST_CHECK_CUDA(cudaMemcpy(h.data(), next, h.size() * 8, cudaMemcpyDeviceToHost));
      for (auto v : h) e += v != static_cast<unsigned long long>(per_thread);
      std::uint64_t ends[2];
      NVST_CHECK_CUDA(cudaMemcpy(ends, words, sizeof(ends), cudaMemcpyDeviceToHost));
      e += ends[0] != ends[1] || ends[0] != static_cast<std::uint64_t>(per_thread * producers);
    }
    const std::string what = "ring buffer: " + std::to_string(per_thread * kProducers) + " items per PE from " +
                             std::to_string(producers) + " producer threads into PE 0's ring of " +
                             std::to_string(kRingCapacity) + ", each once and in order";
    report(what.c_str(), static_cast<long long>(e), ms);
    nvst::barrier_all();
    NVST_CHECK_CUDA(cudaStreamDestroy(consume_stream));
    NVST_CHECK_CUDA(cudaStreamDestroy(produce_stream));
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
