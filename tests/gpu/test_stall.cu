// Work queued right behind a call that waits on the proxy, and kernels that
// hold every SM, must not stop the cross-node data path (docs/06 "Failure",
// docs/09). Each case is a job of two PEs on logical nodes of their own
// (NVST_NODE_SIZE=1 unless set; NVST_TEST_SHARE_GPUS=1 puts both on one
// GPU), run over each provider. A case passes when both PEs are done within
// kLimitS of the launch, every byte is right (random data, poisoned
// destinations, a CPU reference) and the proxy printed no stall report
// (each PE captures its own stderr):
//  - put, wait, answer: PE 0's kernel puts to PE 1 and waits for the answer;
//    PE 1's waits for that data, checks it and answers with a put_signal.
//    Right after its launch each PE queues a copy of what it receives
//    behind its kernel (device to device, into pageable memory, or by the
//    first launch of a kernel, which CUDA_MODULE_LOADING=LAZY loads then),
//    on the legacy default stream or on a stream of its own;
//  - every SM: a grid of SMs x resident blocks; each block puts a chunk with
//    a signal (SET or ADD) to its twin on the other PE, waits for its own
//    and checks the twin's chunk; once with a pageable copy behind it;
//  - the EP Buffer: low-latency dispatch and combine, normal dispatch and
//    combine, each followed at once by a copy of its output into pageable
//    memory (torch's .cpu()) or device memory (.clone()) on its stream.
//    (Not while a foreign grid holds every SM until the call is done: the
//    call's own kernels would find no SM, whatever the data path does.)
//   nvst_stall_tests --np 2 [--provider P] [--case SUBSTRING] [--list]
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "device_io.hpp"
#include "ep_reference.hpp"
#include "gpu_job.hpp"
#include "nvst/device.cuh"
#include "nvst/ep.hpp"
#include "nvst/launch.hpp"
#include "nvst/nvst.hpp"

namespace dev = nvst::dev;
using Clock = std::chrono::steady_clock;
using nvst::test::download;
using nvst::test::upload;

namespace {

constexpr double kLimitS = 5.0;  // the proxy reports a stall after 3 s; the device times out after 15 here
constexpr std::uint64_t kSeed = 20261124;

// ---- what each PE measures and reports --------------------------------------

struct Outcome {
  Clock::time_point t0{}, t1{};
  long long wrong = 0;
  std::string first;
  void start() { t0 = Clock::now(); }
  void stop() { t1 = Clock::now(); }
  double seconds() const {
    const Clock::time_point end = t1 == Clock::time_point{} ? Clock::now() : t1;
    return t0 == Clock::time_point{} ? 0.0 : std::chrono::duration<double>(end - t0).count();
  }
  void add(bool bad, const std::string& what) {
    if (!bad) return;
    if (first.empty()) first = what;
    ++wrong;
  }
};

// This PE's stderr into an unlinked file from construction to finish(),
// passed on to the real stderr as it comes (a PE killed meanwhile keeps
// what it said); finish() restores stderr and returns the text. The proxy's
// watchdog reports on stderr, and a case fails on such a report.
class StderrCapture {
 public:
  StderrCapture() {
    std::fflush(stderr);
    char path[] = "/tmp/nvst_stall_stderr_XXXXXX";
    fd_ = mkstemp(path);
    if (fd_ < 0) return;
    unlink(path);
    saved_ = dup(2);
    dup2(fd_, 2);
    echo_ = std::thread([this] {
      while (!stop_.load()) {
        forward();
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    });
  }
  std::string finish() {
    if (fd_ < 0) return text_;
    std::fflush(stderr);
    stop_ = true;
    echo_.join();
    dup2(saved_, 2);
    forward();  // what came before stderr was restored
    close(saved_);
    close(fd_);
    fd_ = -1;
    return text_;
  }

 private:
  void forward() {
    char chunk[4096];
    for (;;) {
      const ssize_t n = pread(fd_, chunk, sizeof(chunk), static_cast<off_t>(text_.size()));
      if (n <= 0) return;
      text_.append(chunk, static_cast<std::size_t>(n));
      if (write(saved_, chunk, static_cast<std::size_t>(n)) < 0) return;
    }
  }
  int fd_ = -1, saved_ = -1;
  std::string text_;
  std::atomic<bool> stop_{false};
  std::thread echo_;
};

// The proxy's stall reports (src/transport/proxy_watch.cpp), in any case.
bool reports_stall(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const char* mark : {"stuck", "stalled", "has not finished"})
    if (text.find(mark) != std::string::npos) return true;
  return false;
}

std::vector<std::uint8_t> random_bytes(std::uint64_t seed, std::size_t n) {
  std::mt19937_64 rng(seed);
  std::vector<std::uint8_t> v(n);
  for (auto& b : v) b = static_cast<std::uint8_t>(rng() | 1);  // never zero
  return v;
}

long long count_diff(const std::uint8_t* got, const std::uint8_t* want, std::size_t n) {
  long long d = 0;
  for (std::size_t i = 0; i < n; ++i) d += got[i] != want[i];
  return d;
}

// ---- put, wait, answer -------------------------------------------------------

enum class On { kLegacy, kOwnStream };
enum class Behind { kDeviceCopy, kPageableCopy, kFirstLaunch };
constexpr std::size_t kDataBytes = (std::size_t{1} << 20) + 3, kAnswerBytes = (std::size_t{3} << 18) + 5;
enum Word { kDataArrived, kAnswerArrived };

__global__ void put_then_wait(char* data, const char* src, std::uint64_t* sig, int peer) {
  dev::putmem_signal_block(data, src, kDataBytes, sig + kDataArrived, 1, dev::SignalOp::kSet, peer);
  dev::signal_wait_until(sig + kAnswerArrived, dev::Cmp::kGe, 1);
}

__global__ void check_then_answer(const char* data, const char* want, char* answer, const char* src, std::uint64_t* sig,
                                  int peer, unsigned long long* wrong) {
  dev::signal_wait_until(sig + kDataArrived, dev::Cmp::kGe, 1);
  unsigned long long bad = 0;
  for (std::size_t i = threadIdx.x; i < kDataBytes; i += blockDim.x) bad += data[i] != want[i];
  if (bad) atomicAdd(wrong, bad);
  __syncthreads();
  dev::putmem_signal_block(answer, src, kAnswerBytes, sig + kAnswerArrived, 1, dev::SignalOp::kSet, peer);
}

// Launched once only, behind a waiting kernel: with CUDA_MODULE_LOADING=LAZY
// its loading, at that launch, waits for the kernels running.
__global__ void copy_on_first_use(char* to, const char* from, std::size_t n) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    to[i] = from[i];
}

void put_wait_answer(Outcome& o, On on, Behind behind) {
  const int me = nvst::my_pe(), peer = 1 - me;
  char* data = static_cast<char*>(nvst::malloc(kDataBytes));
  char* answer = static_cast<char*>(nvst::malloc(kAnswerBytes));
  char* src = static_cast<char*>(nvst::malloc(std::max(kDataBytes, kAnswerBytes)));
  auto* sig = static_cast<std::uint64_t*>(nvst::calloc(2, 8));
  const auto data_bytes = random_bytes(kSeed + 1, kDataBytes), answer_bytes = random_bytes(kSeed + 2, kAnswerBytes);
  const auto& mine = me == 0 ? data_bytes : answer_bytes;
  const auto& received = me == 0 ? answer_bytes : data_bytes;  // what this PE's kernel waits for
  char* landing = me == 0 ? answer : data;
  NVST_CHECK_CUDA(cudaMemcpy(src, mine.data(), mine.size(), cudaMemcpyHostToDevice));
  NVST_CHECK_CUDA(cudaMemset(data, 0xA5, kDataBytes));
  NVST_CHECK_CUDA(cudaMemset(answer, 0xA5, kAnswerBytes));
  char* want = reinterpret_cast<char*>(upload(data_bytes));  // PE 1's kernel checks the data against it
  char* copy = nullptr;
  NVST_CHECK_CUDA(cudaMalloc(&copy, received.size()));
  NVST_CHECK_CUDA(cudaMemset(copy, 0x5A, received.size()));
  unsigned long long* wrong = nullptr;
  NVST_CHECK_CUDA(cudaMalloc(&wrong, sizeof(*wrong)));
  NVST_CHECK_CUDA(cudaMemset(wrong, 0, sizeof(*wrong)));
  cudaStream_t s = cudaStreamLegacy;
  if (on == On::kOwnStream) NVST_CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::vector<std::uint8_t> host(received.size(), 0x5A);  // pageable, as a std::vector or torch's .cpu()
  NVST_CHECK_CUDA(cudaDeviceSynchronize());
  nvst::barrier_all();

  o.start();
  if (me == 0)
    put_then_wait<<<1, 256, 0, s>>>(data, src, sig, peer);
  else
    check_then_answer<<<1, 256, 0, s>>>(data, want, answer, src, sig, peer, wrong);
  NVST_CHECK_LAUNCH();
  if (behind == Behind::kDeviceCopy) {
    NVST_CHECK_CUDA(cudaMemcpyAsync(copy, landing, received.size(), cudaMemcpyDeviceToDevice, s));
  } else if (behind == Behind::kFirstLaunch) {
    copy_on_first_use<<<8, 256, 0, s>>>(copy, landing, received.size());
    NVST_CHECK_LAUNCH();
  } else if (on == On::kLegacy) {
    NVST_CHECK_CUDA(cudaMemcpy(host.data(), landing, received.size(), cudaMemcpyDeviceToHost));
  } else {
    NVST_CHECK_CUDA(cudaMemcpyAsync(host.data(), landing, received.size(), cudaMemcpyDeviceToHost, s));
  }
  NVST_CHECK_CUDA(cudaStreamSynchronize(s));
  NVST_CHECK_CUDA(cudaDeviceSynchronize());
  o.stop();

  if (behind != Behind::kPageableCopy) host = download(reinterpret_cast<std::uint8_t*>(copy), received.size());
  o.add(count_diff(host.data(), received.data(), received.size()) != 0, "the queued copy of the received bytes");
  const auto landed = download(reinterpret_cast<std::uint8_t*>(landing), received.size());
  o.add(count_diff(landed.data(), received.data(), received.size()) != 0, "the received bytes in the heap");
  o.add(download(wrong, 1)[0] != 0, "PE 1's kernel saw wrong data before answering");
  nvst::barrier_all();
  if (on == On::kOwnStream) NVST_CHECK_CUDA(cudaStreamDestroy(s));
  for (void* p : {static_cast<void*>(want), static_cast<void*>(copy), static_cast<void*>(wrong)})
    NVST_CHECK_CUDA(cudaFree(p));
}

// ---- every SM ----------------------------------------------------------------

constexpr int kFillThreads = 128;
constexpr std::size_t kChunk = 1040;  // bytes a block puts

__host__ __device__ std::uint8_t pattern(int pe, std::size_t i) {
  std::uint64_t x = kSeed * 0x9e3779b97f4a7c15ull + static_cast<std::uint64_t>(pe) * 0xbf58476d1ce4e5b9ull + i;
  x ^= x >> 31;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 29;
  return static_cast<std::uint8_t>(x | 1);
}

__global__ void fill_pattern(std::uint8_t* p, std::size_t n, int pe) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    p[i] = pattern(pe, i);
}

// Block b puts its chunk to block b's chunk on `peer` with a signal on word
// b, then waits for its own word and checks the chunk the twin put here.
__global__ void __launch_bounds__(kFillThreads)
    exchange_per_block(std::uint8_t* recv, const std::uint8_t* send, std::uint64_t* sig, dev::SignalOp op, int peer,
                       unsigned long long* wrong) {
  const std::size_t b = blockIdx.x, at = b * kChunk;
  dev::putmem_signal_nbi_block(recv + at, send + at, kChunk, sig + b, 1, op, peer);
  dev::signal_wait_until(sig + b, dev::Cmp::kEq, 1);
  unsigned long long bad = 0;
  for (std::size_t i = threadIdx.x; i < kChunk; i += blockDim.x) bad += recv[at + i] != pattern(peer, at + i);
  if (bad) atomicAdd(wrong, bad);
}

void every_sm(Outcome& o, dev::SignalOp op, bool pageable_behind) {
  const int me = nvst::my_pe(), peer = 1 - me;
  int sms = 0, per_sm = 0;
  NVST_CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, nvst::device()));
  NVST_CHECK_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, exchange_per_block, kFillThreads, 0));
  const int grid = sms * per_sm;
  const std::size_t bytes = static_cast<std::size_t>(grid) * kChunk;
  auto* recv = static_cast<std::uint8_t*>(nvst::malloc(bytes));
  auto* send = static_cast<std::uint8_t*>(nvst::malloc(bytes));
  auto* sig = static_cast<std::uint64_t*>(nvst::calloc(static_cast<std::size_t>(grid), 8));
  unsigned long long* wrong = nullptr;
  NVST_CHECK_CUDA(cudaMalloc(&wrong, sizeof(*wrong)));
  NVST_CHECK_CUDA(cudaMemset(wrong, 0, sizeof(*wrong)));
  NVST_CHECK_CUDA(cudaMemset(recv, 0xA5, bytes));
  fill_pattern<<<264, 256>>>(send, bytes, me);
  NVST_CHECK_LAUNCH();
  std::vector<std::uint8_t> host(bytes, 0x5A);
  NVST_CHECK_CUDA(cudaDeviceSynchronize());
  if (me == 0) std::printf("# %d blocks of %d threads (%d SMs x %d)\n", grid, kFillThreads, sms, per_sm);
  nvst::barrier_all();

  o.start();
  exchange_per_block<<<grid, kFillThreads>>>(recv, send, sig, op, peer, wrong);
  NVST_CHECK_LAUNCH();
  if (pageable_behind) NVST_CHECK_CUDA(cudaMemcpy(host.data(), recv, bytes, cudaMemcpyDeviceToHost));
  NVST_CHECK_CUDA(cudaDeviceSynchronize());
  o.stop();

  if (!pageable_behind) host = download(recv, bytes);
  long long bad = 0;
  for (std::size_t i = 0; i < bytes; ++i) bad += host[i] != pattern(peer, i);
  o.add(bad != 0, std::to_string(bad) + " received bytes wrong (CPU)");
  o.add(download(wrong, 1)[0] != 0, "a block saw its twin's chunk wrong");
  nvst::barrier_all();
  NVST_CHECK_CUDA(cudaFree(wrong));
}

// ---- the EP Buffer -----------------------------------------------------------

enum class EpCall { kLlDispatch, kLlCombine, kDispatch, kCombine };
enum class EpBehind { kPageableCopy, kDeviceCopy };

// One EP call across nodes, with `behind` right after it; its output is
// then checked against the CPU reference (tests/common/ep_reference.hpp).
// The calls that combine first dispatch (synchronised) and make the
// "expert" outputs on the host.
void ep_case(Outcome& o, EpCall call, EpBehind behind) {
  using namespace nvst::test;
  const int me = nvst::my_pe(), R = nvst::n_pes(), G = nvst::team_n_pes(nvst::Team::kNode);
  const int T = 64, H = 1024, K = 4, E = 4 * R, el = E / R;
  nvst::ep::Buffer buf(nvst::ep::Buffer::nvl_size_hint(R * T, H, K, nvst::ep::XType::kBF16), T, H, E, K);
  nvst::ep::Config cfg;
  cfg.num_sms = 8;
  cfg.threads_per_block = 256;
  const std::vector<PeInput> all = make_all_inputs(RouteKind::kRandom, R, T, H, K, E, kSeed);
  const PeInput& mine = all[me];
  auto* d_x = upload(mine.x);
  auto* d_topk = upload(mine.topk);
  auto* d_w = upload(mine.weights);
  const std::size_t row = static_cast<std::size_t>(H) * 2;
  const std::size_t ll_rows = static_cast<std::size_t>(R) * T;  // rows per expert of a low-latency buffer set
  // Every destination sized and allocated before the call: cudaMalloc may
  // wait for running kernels.
  const std::size_t most = std::max(static_cast<std::size_t>(el) * ll_rows, ll_rows) * row;
  std::vector<std::uint8_t> host(most, 0x5A);
  std::uint8_t* copy = nullptr;
  NVST_CHECK_CUDA(cudaMalloc(&copy, most));
  NVST_CHECK_CUDA(cudaMemset(copy, 0x5A, most));
  std::uint16_t* d_out = upload(std::vector<std::uint16_t>(static_cast<std::size_t>(T) * H, 0xFFFF));
  for (int set = 0; set < 2; ++set)
    NVST_CHECK_CUDA(cudaMemset(buf.low_latency_views(set, false).recv_x, 0xA5, el * ll_rows * row));
  NVST_CHECK_CUDA(cudaMemset(buf.local_nvl_region().ptr, 0xA5, buf.local_nvl_region().bytes));
  const std::vector<RecvRow> rows = expected_rows(all, me, K, el);
  auto ll_expert = [](std::uint16_t x, std::int64_t e) { return expert_transform(x, static_cast<int>(e % 7)); };

  // What the combines need first: a dispatch, and the experts' outputs.
  nvst::ep::LowLatencyDispatchOutput ll_in;
  nvst::ep::DispatchHandle handle;
  std::uint16_t* d_y = nullptr;
  if (call == EpCall::kLlCombine) {
    ll_in = buf.low_latency_dispatch({d_x, d_topk, T, H, K, E, false}, cudaStreamLegacy);
    NVST_CHECK_CUDA(cudaDeviceSynchronize());
    const std::size_t n = el * ll_rows;
    const auto info = download(ll_in.recv_src_info, n * 3);
    const auto count = download(ll_in.recv_count, el);
    const auto x = download(static_cast<const std::uint16_t*>(ll_in.recv_x), n * H);
    std::vector<std::uint16_t> y(n * H, 0);
    for (int e = 0; e < el; ++e)
      for (int i = 0; i < std::min<int>(count[e], static_cast<int>(ll_rows)); ++i)
        for (int v = 0; v < H; ++v) {
          const std::size_t at = (static_cast<std::size_t>(e) * ll_rows + i) * H + v;
          y[at] = ll_expert(x[at], me * el + e);
        }
    d_y = upload(y);
  } else if (call == EpCall::kCombine) {
    const nvst::ep::DispatchOutput d =
        buf.dispatch({d_x, nullptr, d_topk, d_w, T, H, K, E, nvst::ep::XType::kBF16, 1}, handle, cfg, cudaStreamLegacy);
    NVST_CHECK_CUDA(cudaDeviceSynchronize());
    const auto x =
        download(static_cast<const std::uint16_t*>(d.recv_x), static_cast<std::size_t>(d.num_recv_tokens) * H);
    std::vector<std::uint16_t> y(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) y[i] = expert_transform(x[i], me);
    d_y = upload(y);
  }
  NVST_CHECK_CUDA(cudaDeviceSynchronize());
  nvst::barrier_all();

  // The call under test; `out` and `bytes` say what it produced.
  const void* out = nullptr;
  std::size_t bytes = 0;
  nvst::ep::LowLatencyDispatchOutput ll_out;
  int received = 0;
  auto launch = [&](cudaStream_t s) {
    switch (call) {
      case EpCall::kLlDispatch:
        ll_out = buf.low_latency_dispatch({d_x, d_topk, T, H, K, E, false}, s);
        out = ll_out.recv_x;
        bytes = el * static_cast<std::size_t>(ll_out.max_rows_per_expert) * row;
        break;
      case EpCall::kLlCombine:
        buf.low_latency_combine({d_y, d_topk, d_w, T, H, K, E, ll_in.buffer_index}, d_out, s);
        out = d_out;
        bytes = static_cast<std::size_t>(T) * row;
        break;
      case EpCall::kDispatch: {
        nvst::ep::DispatchHandle fresh;  // a first dispatch, as a layer's
        const nvst::ep::DispatchOutput d =
            buf.dispatch({d_x, nullptr, d_topk, d_w, T, H, K, E, nvst::ep::XType::kBF16, 1}, fresh, cfg, s);
        out = d.recv_x;
        received = d.num_recv_tokens;
        bytes = static_cast<std::size_t>(received) * row;
        break;
      }
      case EpCall::kCombine:
        buf.combine({d_y, nullptr, nullptr, H}, handle, {d_out, nullptr}, cfg, s);
        out = d_out;
        bytes = static_cast<std::size_t>(T) * row;
        break;
    }
  };
  {  // on the legacy default stream, torch's default current stream
    o.start();
    launch(cudaStreamLegacy);
    if (behind == EpBehind::kPageableCopy) {
      NVST_CHECK_CUDA(cudaMemcpyAsync(host.data(), out, bytes, cudaMemcpyDeviceToHost, cudaStreamLegacy));
    } else {
      NVST_CHECK_CUDA(cudaMemcpyAsync(copy, out, bytes, cudaMemcpyDeviceToDevice, cudaStreamLegacy));
    }
    NVST_CHECK_CUDA(cudaStreamSynchronize(cudaStreamLegacy));
    o.stop();
    if (behind == EpBehind::kDeviceCopy) host = download(copy, bytes);
  }

  auto value = [&](std::size_t i) {  // bf16 value i of what came back
    std::uint16_t b;
    std::memcpy(&b, &host[i * 2], 2);
    return b;
  };
  switch (call) {
    case EpCall::kLlDispatch: {
      const std::size_t rows_pe = static_cast<std::size_t>(ll_out.max_rows_per_expert);
      const auto count = download(ll_out.recv_count, el);
      const auto info = download(ll_out.recv_src_info, el * rows_pe * 3);
      for (int e = 0; e < el; ++e) {
        std::set<std::tuple<int, int, int>> want, seen;
        for (int p = 0; p < R; ++p)
          for (int t = 0; t < all[p].num_tokens; ++t)
            for (int k = 0; k < K; ++k)
              if (all[p].topk[static_cast<std::size_t>(t) * K + k] == me * el + e) want.insert({p, t, k});
        o.add(count[e] != static_cast<int>(want.size()), "ll dispatch: recv_count of expert " + std::to_string(e));
        for (int i = 0; i < std::min<int>(count[e], static_cast<int>(rows_pe)); ++i) {
          const std::size_t slot = static_cast<std::size_t>(e) * rows_pe + i;
          const std::tuple<int, int, int> key{info[slot * 3], info[slot * 3 + 1], info[slot * 3 + 2]};
          if (!want.count(key) || !seen.insert(key).second) {
            o.add(true, "ll dispatch: an unexpected or repeated row");
            continue;
          }
          const auto [p, t, k] = key;
          o.add(std::memcmp(&host[slot * row], &all[p].x[static_cast<std::size_t>(t) * H], row) != 0,
                "ll dispatch: expert " + std::to_string(e) + " slot " + std::to_string(i));
        }
      }
      break;
    }
    case EpCall::kLlCombine:
      for (int t = 0; t < T; ++t) {
        int bad = 0;
        for (int v = 0; v < H; ++v)
          bad += value(static_cast<std::size_t>(t) * H + v) != ll_combine_expected(mine, t, v, H, K, ll_expert);
        o.add(bad != 0, "ll combine: token " + std::to_string(t));
      }
      break;
    case EpCall::kDispatch:
      o.add(received != static_cast<int>(rows.size()),
            "dispatch: " + std::to_string(received) + " rows, expected " + std::to_string(rows.size()));
      for (std::size_t i = 0; i < std::min(rows.size(), static_cast<std::size_t>(received)); ++i)
        o.add(std::memcmp(&host[i * row], &all[rows[i].src].x[static_cast<std::size_t>(rows[i].token) * H], row) != 0,
              "dispatch: row " + std::to_string(i));
      break;
    case EpCall::kCombine:
      for (int t = 0; t < T; ++t) {
        int bad = 0;
        for (int v = 0; v < H; ++v)
          bad += value(static_cast<std::size_t>(t) * H + v) !=
                 bf16_bits(normal_combine_expected(mine, t, v, H, K, el, me, R, G, expert_transform));
        o.add(bad != 0, "combine: token " + std::to_string(t));
      }
      break;
  }
  nvst::barrier_all();  // every PE is done with the Buffer
  for (void* p : {static_cast<void*>(d_x), static_cast<void*>(d_topk), static_cast<void*>(d_w),
                  static_cast<void*>(copy), static_cast<void*>(d_out), static_cast<void*>(d_y)})
    NVST_CHECK_CUDA(cudaFree(p));
}

// ---- the cases, and how they run ---------------------------------------------

struct Case {
  std::string name;
  std::function<void(Outcome&)> run;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> all = [] {
    std::vector<Case> v;
    for (On on : {On::kLegacy, On::kOwnStream})
      for (Behind behind : {Behind::kDeviceCopy, Behind::kPageableCopy, Behind::kFirstLaunch})
        v.push_back({std::string("put, wait, answer on ") + (on == On::kLegacy ? "the legacy stream" : "a stream") +
                         ", then " +
                         (behind == Behind::kDeviceCopy     ? "a device-to-device copy of the received bytes"
                          : behind == Behind::kPageableCopy ? "a copy of the received bytes into pageable memory"
                                                            : "the first launch of a kernel that copies them") +
                         " behind it",
                     [=](Outcome& o) { put_wait_answer(o, on, behind); }});
    v.push_back({"every SM waits, each block for a put_signal (SET) from its twin",
                 [](Outcome& o) { every_sm(o, dev::SignalOp::kSet, false); }});
    v.push_back({"every SM waits, each block for a put_signal (ADD) from its twin",
                 [](Outcome& o) { every_sm(o, dev::SignalOp::kAdd, false); }});
    v.push_back({"every SM waits (SET), a copy into pageable memory behind",
                 [](Outcome& o) { every_sm(o, dev::SignalOp::kSet, true); }});
    const std::pair<EpCall, const char*> calls[] = {{EpCall::kLlDispatch, "ep low_latency_dispatch"},
                                                    {EpCall::kLlCombine, "ep low_latency_combine"},
                                                    {EpCall::kDispatch, "ep dispatch (first)"},
                                                    {EpCall::kCombine, "ep combine"}};
    for (const auto& [call, name] : calls)
      for (EpBehind behind : {EpBehind::kPageableCopy, EpBehind::kDeviceCopy})
        v.push_back(
            {std::string(name) + (behind == EpBehind::kPageableCopy ? ", then .cpu() of its output (pageable) behind it"
                                                                    : ", then .clone() of its output behind it"),
             [=, call = call](Outcome& o) { ep_case(o, call, behind); }});
    return v;
  }();
  return all;
}

// A case inside a PE: its verdict on stdout; the exit status says it.
int run_case(const Case& c) {
  const char* rank = std::getenv("NVST_RANK");
  StderrCapture capture;
  Outcome o;
  try {
    nvst::init();
    NVST_REQUIRE(nvst::n_pes() == 2 && nvst::team_n_pes(nvst::Team::kNode) == 1,
                 "the cases need 2 PEs on logical nodes of their own (NVST_NODE_SIZE=1)");
    c.run(o);
  } catch (const std::exception& e) {
    o.add(true, e.what());
  }
  const bool stalled = reports_stall(capture.finish());
  const double s = o.seconds();
  const bool ok = o.wrong == 0 && s < kLimitS && !stalled;
  const std::string wrong = o.wrong ? ", " + std::to_string(o.wrong) + " wrong, first: " + o.first : "";
  std::printf("[PE %s] %s %s: %.2f s (limit %.0f)%s%s\n", rank ? rank : "?", ok ? "PASS" : "FAIL", c.name.c_str(), s,
              kLimitS, wrong.c_str(), stalled ? ", the proxy reported a stall on stderr" : "");
  std::fflush(stdout);
  // Finalize only where every PE passed: a PE whose kernel timed out has
  // lost its CUDA context, and the other must not wait for it in finalize.
  int all_ok = ok ? 1 : 0;
  try {
    const auto got = nvst::bootstrap_allgather(&all_ok, sizeof(all_ok));
    for (std::size_t p = 0; p < got.size() / sizeof(int); ++p) all_ok &= reinterpret_cast<const int*>(got.data())[p];
  } catch (const std::exception&) {
    all_ok = 0;
  }
  if (all_ok) {
    nvst::finalize();
    return 0;
  }
  std::fflush(stderr);
  _exit(ok ? 0 : 1);
}

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

}  // namespace

int main(int argc, char** argv) {
  int np = 2;
  std::string provider, filter;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--np" && i + 1 < argc) {
      np = std::atoi(argv[++i]);
    } else if (a == "--provider" && i + 1 < argc) {
      provider = argv[++i];
    } else if (a == "--case" && i + 1 < argc) {
      filter = argv[++i];
    } else if (a == "--list") {
      for (const Case& c : cases()) std::printf("%s\n", c.name.c_str());
      return 0;
    } else {
      std::fprintf(stderr, "usage: %s --np 2 [--provider P] [--case SUBSTRING] [--list]\n", argv[0]);
      return 2;
    }
  }
  if (np != 2) {
    std::fprintf(stderr, "nvst_stall_tests: the cases are written for --np 2\n");
    return 2;
  }
  try {
    if (nvst::is_pe_process()) {
      std::setvbuf(stdout, nullptr, _IOLBF, 0);
      const char* c = std::getenv("NVST_TEST_CASE");
      const int index = c ? std::atoi(c) : -1;
      if (index < 0 || index >= static_cast<int>(cases().size())) {
        std::fprintf(stderr, "nvst_stall_tests: no case %s\n", c ? c : "(NVST_TEST_CASE unset)");
        return 2;
      }
      return run_case(cases()[static_cast<std::size_t>(index)]);
    }
    if (int skip = nvst::test::skip_unless_gpus(np)) return skip;
    std::vector<std::string> providers = {"shm", "tcp;ofi_rxm"};
    if (!provider.empty())
      providers = {provider};
    else if (const char* p = std::getenv("NVST_FABRIC_PROVIDER"); p && *p)
      providers = {p};
    int passed = 0, failed = 0;
    for (const std::string& prov : providers)
      for (std::size_t i = 0; i < cases().size(); ++i) {
        const Case& c = cases()[i];
        if (!filter.empty() && c.name.find(filter) == std::string::npos) continue;
        nvst::SpawnOptions o;
        o.nprocs = 2;
        o.argv = std::vector<std::string>(argv, argv + argc);
        // A case that stalls ends at the device timeout, well past kLimitS.
        o.env = {{"NVST_TEST_CASE", std::to_string(i)},
                 {"NVST_FABRIC_PROVIDER", prov},
                 {"NVST_NODE_SIZE", env_or("NVST_NODE_SIZE", "1")},
                 {"NVST_DEVICE_TIMEOUT_S", env_or("NVST_DEVICE_TIMEOUT_S", "15")},
                 {"NVST_TIMEOUT_S", env_or("NVST_TIMEOUT_S", "60")},
                 {"CUDA_MODULE_LOADING", env_or("CUDA_MODULE_LOADING", "LAZY")}};
        o.grace_seconds = 15;
        o.deadline_seconds = 120;
        const auto t0 = Clock::now();
        const std::vector<int> st = nvst::spawn(o);
        bool ok = st.size() == 2;
        for (int status : st) ok &= WIFEXITED(status) && WEXITSTATUS(status) == 0;
        std::printf("%s %s [%s] (job %.1f s)\n", ok ? "PASS" : "FAIL", c.name.c_str(), prov.c_str(),
                    std::chrono::duration<double>(Clock::now() - t0).count());
        std::fflush(stdout);
        (ok ? passed : failed)++;
      }
    std::printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nvst_stall_tests: %s\n", e.what());
    return 1;
  }
}
