// Can a resident kernel land the proxy's inbox pieces into the GPU heap, so
// that the proxy thread makes no CUDA call on the data path (docs/06)? A
// kernel that never ends breaks every cudaDeviceSynchronize() of the
// process (barrier_all, torch.cuda.synchronize()) unless it runs where that
// call does not wait for it: in a green context (an SM partition of the
// device, CUDA 12.4+), which shares the primary context's memory. This probe
// measures, on one GPU and one process, what that design needs:
//   sync     cudaDeviceSynchronize() in the primary context returns while the
//            agent runs in a green context (and, for contrast, whether it
//            does with the agent on a plain non-blocking stream);
//   memory   the agent writes memory cudaMalloc'd in the primary context;
//   starved  pieces still land while a primary kernel fills every SM;
//   copies   ... and while a pageable device-to-host copy waits behind that
//            kernel on the legacy stream (the copy-engine stall the proxy's
//            own CUDA calls meet today);
//   rate     the agent's landing rate (mapped host memory -> device memory,
//            16-byte loads and stores, one block).
// The host side feeds the agent through mapped memory only: no CUDA call.
// Run: build/bin/nvst_landing_probe   (one GPU; prints PROBE lines)
#include <cuda.h>
#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <thread>
#include <vector>

namespace {

constexpr int kSlots = 16;
constexpr std::size_t kPiece = std::size_t{256} << 10;
constexpr std::size_t kHeap = kPiece * kSlots * 4;
using Clock = std::chrono::steady_clock;

#define CHECK(call) \
  do { \
    cudaError_t e_ = (call); \
    if (e_ != cudaSuccess) { \
      std::printf("PROBE setup: FAIL (%s: %s, line %d)\n", #call, cudaGetErrorString(e_), __LINE__); \
      std::exit(1); \
    } \
  } while (0)

// The mailbox in mapped host memory: the host posts piece `posted` (its
// inbox slot and heap offset), the agent answers `landed` once its bytes
// are in the heap. Invariant: landed <= posted <= landed + kSlots.
struct Mailbox {
  volatile std::uint64_t posted;
  volatile std::uint64_t landed;
  volatile std::uint64_t stop;
  volatile std::uint64_t dest[kSlots];  // heap offset of the piece in each slot
};

__global__ void agent(Mailbox* box, const uint4* inbox, char* heap) {
  __shared__ std::uint64_t next;
  __shared__ int leave;
  if (threadIdx.x == 0) next = box->landed;
  for (;;) {
    if (threadIdx.x == 0) {
      while (box->posted == next && box->stop == 0) __nanosleep(100);
      leave = box->posted == next;  // stopped with nothing left
    }
    __syncthreads();
    if (leave) return;
    const int slot = static_cast<int>(next % kSlots);
    const uint4* src = inbox + slot * (kPiece / sizeof(uint4));
    auto* dst = reinterpret_cast<uint4*>(heap + box->dest[slot]);
    // __ldcv: the slot's bytes change under the same address, never cached.
    for (std::size_t i = threadIdx.x; i < kPiece / sizeof(uint4); i += blockDim.x) dst[i] = __ldcv(src + i);
    __threadfence_system();
    __syncthreads();
    if (threadIdx.x == 0) box->landed = ++next;
    __syncthreads();
  }
}

// Fills every SM until *release is set (a user kernel that waits on the proxy).
__global__ void hog(volatile int* release) {
  while (*release == 0) __nanosleep(1000);
}

// A driver function as of the CUDA version this probe was built with (the
// green-context calls arrived between 12.4 and 12.5); names what is missing.
template <typename F>
F entry(const char* name) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult q{};
  if (cudaGetDriverEntryPointByVersion(name, &p, CUDART_VERSION, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess) {
    std::printf("PROBE entry: %s not found (query result %d)\n", name, static_cast<int>(q));
    return nullptr;
  }
  return reinterpret_cast<F>(p);
}

// Whether f() returns within `limit` (it keeps running on its thread if not).
template <typename F>
bool returns_within(F f, std::chrono::milliseconds limit) {
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> fut = done->get_future();
  std::thread([f, done] {
    f();
    done->set_value();
  }).detach();
  return fut.wait_for(limit) == std::future_status::ready;
}

}  // namespace

int main() {
  CHECK(cudaSetDevice(0));
  CHECK(cudaFree(nullptr));
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  Mailbox* box = nullptr;
  uint4* inbox = nullptr;
  CHECK(cudaHostAlloc(reinterpret_cast<void**>(&box), sizeof(Mailbox), cudaHostAllocMapped));
  CHECK(cudaHostAlloc(reinterpret_cast<void**>(&inbox), kPiece * kSlots, cudaHostAllocMapped));
  std::memset(box, 0, sizeof(Mailbox));
  char* heap = nullptr;
  CHECK(cudaMalloc(&heap, kHeap));
  CHECK(cudaMemset(heap, 0, kHeap));
  int* release = nullptr;
  CHECK(cudaHostAlloc(reinterpret_cast<void**>(&release), sizeof(int), cudaHostAllocMapped));

  using GetRes = CUresult (*)(CUdevice, CUdevResource*, CUdevResourceType);
  using Split = CUresult (*)(CUdevResource*, unsigned*, const CUdevResource*, CUdevResource*, unsigned, unsigned);
  using Desc = CUresult (*)(CUdevResourceDesc*, CUdevResource*, unsigned);
  using Create = CUresult (*)(CUgreenCtx*, CUdevResourceDesc, CUdevice, unsigned);
  using Stream = CUresult (*)(CUstream*, CUgreenCtx, unsigned, int);
  using FromGreen = CUresult (*)(CUcontext*, CUgreenCtx);
  using Push = CUresult (*)(CUcontext);
  using Pop = CUresult (*)(CUcontext*);
  auto get_res = entry<GetRes>("cuDeviceGetDevResource");
  auto split = entry<Split>("cuDevSmResourceSplitByCount");
  auto gen_desc = entry<Desc>("cuDevResourceGenerateDesc");
  auto create = entry<Create>("cuGreenCtxCreate");
  auto make_stream = entry<Stream>("cuGreenCtxStreamCreate");
  auto from_green = entry<FromGreen>("cuCtxFromGreenCtx");
  auto push = entry<Push>("cuCtxPushCurrent");
  auto pop = entry<Pop>("cuCtxPopCurrent");
  if (!get_res || !split || !gen_desc || !create || !make_stream || !from_green || !push || !pop) {
    std::printf("PROBE green: FAIL (the driver lacks part of the green-context API: see the entry lines)\n");
    return 1;
  }
  CUdevResource all{}, part{}, rest{};
  unsigned groups = 1;
  CUdevResourceDesc desc{};
  CUgreenCtx green{};
  CUstream gstream{};
  CUcontext gctx{};
  if (get_res(0, &all, CU_DEV_RESOURCE_TYPE_SM) != CUDA_SUCCESS ||
      split(&part, &groups, &all, &rest, 0, all.sm.minSmPartitionSize) != CUDA_SUCCESS ||
      gen_desc(&desc, &part, 1) != CUDA_SUCCESS ||
      create(&green, desc, 0, CU_GREEN_CTX_DEFAULT_STREAM) != CUDA_SUCCESS ||
      make_stream(&gstream, green, CU_STREAM_NON_BLOCKING, 0) != CUDA_SUCCESS ||
      from_green(&gctx, green) != CUDA_SUCCESS) {
    std::printf("PROBE green: FAIL (could not create a green context)\n");
    return 1;
  }
  std::printf("PROBE green: PASS (agent partition %u of %d SMs, min %u)\n", part.sm.smCount, sms,
              all.sm.minSmPartitionSize);

  // For contrast: the same agent on a plain non-blocking stream.
  cudaStream_t plain{};
  CHECK(cudaStreamCreateWithFlags(&plain, cudaStreamNonBlocking));
  agent<<<1, 1024, 0, plain>>>(box, inbox, heap);
  CHECK(cudaGetLastError());
  const bool plain_sync = returns_within([] { cudaDeviceSynchronize(); }, std::chrono::milliseconds(1000));
  box->stop = 1;
  CHECK(cudaStreamSynchronize(plain));
  box->stop = 0;
  std::printf("PROBE sync_plain_stream: %s (cudaDeviceSynchronize %s while an agent runs on a plain stream)\n",
              plain_sync ? "INFO" : "INFO", plain_sync ? "returned" : "waited for it");
  CHECK(cudaDeviceSynchronize());

  push(gctx);
  agent<<<1, 1024, 0, reinterpret_cast<cudaStream_t>(gstream)>>>(box, inbox, heap);
  const cudaError_t launched = cudaGetLastError();
  CUcontext popped{};
  pop(&popped);
  if (launched != cudaSuccess) {
    std::printf("PROBE launch: FAIL (agent in the green context: %s)\n", cudaGetErrorString(launched));
    return 1;
  }
  const bool sync_ok = returns_within([] { cudaDeviceSynchronize(); }, std::chrono::milliseconds(1000));
  std::printf("PROBE sync: %s (cudaDeviceSynchronize in the primary context with the agent running)\n",
              sync_ok ? "PASS" : "FAIL");

  // Feeds `n` pieces through the mapped mailbox; returns seconds, or -1 on a
  // timeout. Piece i carries the byte (i * 7 + 1) and lands at (i % 64) pieces.
  auto feed = [&](int n, double limit_s) {
    const auto t0 = Clock::now();
    for (int i = 0; i < n; ++i) {
      const std::uint64_t seq = box->posted;
      while (seq - box->landed >= kSlots)
        if (std::chrono::duration<double>(Clock::now() - t0).count() > limit_s) return -1.0;
      const int slot = static_cast<int>(seq % kSlots);
      std::memset(reinterpret_cast<char*>(inbox) + slot * kPiece, (i * 7 + 1) & 0xff, kPiece);
      box->dest[slot] = (static_cast<std::uint64_t>(i) % (kHeap / kPiece)) * kPiece;
      std::atomic_thread_fence(std::memory_order_seq_cst);
      box->posted = seq + 1;
    }
    while (box->landed != box->posted)
      if (std::chrono::duration<double>(Clock::now() - t0).count() > limit_s) return -1.0;
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  auto heap_holds = [&](int first, int n) {  // the last n pieces fed, starting at index first
    std::vector<char> back(kPiece);
    for (int i = first; i < first + n; ++i) {
      const std::size_t at = (static_cast<std::size_t>(i) % (kHeap / kPiece)) * kPiece;
      if (cudaMemcpy(back.data(), heap + at, kPiece, cudaMemcpyDeviceToHost) != cudaSuccess) return false;
      for (std::size_t k = 0; k < kPiece; k += 4093)
        if (back[k] != static_cast<char>((i * 7 + 1) & 0xff)) return false;
    }
    return true;
  };

  const double t_rate = feed(256, 10);
  std::printf("PROBE memory: %s (the agent's stores into cudaMalloc'd heap)\n",
              t_rate > 0 && heap_holds(192, 64) ? "PASS" : "FAIL");
  if (t_rate > 0)
    std::printf(
        "PROBE rate: INFO (%.2f GB/s landing 256 pieces of 256 KiB, one block of 1024 threads, host "
        "memset included)\n",
        256.0 * kPiece / t_rate / 1e9);

  // Every SM filled by a primary kernel that waits for the pieces.
  int per_sm = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, hog, 128, 0));
  *release = 0;
  hog<<<sms * per_sm, 128>>>(release);
  CHECK(cudaGetLastError());
  const double t_starved = feed(64, 10);
  std::printf("PROBE starved: %s (64 pieces landed while %d blocks fill every SM%s)\n", t_starved > 0 ? "PASS" : "FAIL",
              sms * per_sm, t_starved > 0 ? "" : ": timed out");

  // A pageable copy queued behind the hog on the legacy stream.
  std::vector<char> pageable(kPiece);
  std::thread copier([&] { cudaMemcpy(pageable.data(), heap, kPiece, cudaMemcpyDeviceToHost); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const double t_copy = feed(64, 10);
  std::printf("PROBE copies: %s (64 pieces landed while a pageable copy waits behind that kernel%s)\n",
              t_copy > 0 ? "PASS" : "FAIL", t_copy > 0 ? "" : ": timed out");
  *release = 1;
  copier.join();
  CHECK(cudaDeviceSynchronize());

  box->stop = 1;
  push(gctx);
  const bool stopped = cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(gstream)) == cudaSuccess;
  pop(&popped);
  std::printf("PROBE stop: %s (the agent ends when told)\n", stopped ? "PASS" : "FAIL");
  return sync_ok && t_rate > 0 && t_starved > 0 && t_copy > 0 && stopped ? 0 : 1;
}
