// Tensor parallelism with the communication inside the kernels that
// produce the data.
//
//   build/bin/tensor_parallel --np 2        (NVST_TEST_SHARE_GPUS=1: PEs share one GPU)
//
// Two linear layers split Megatron's way over n PEs:
//  - column-parallel Y = X W1^T: PE r computes output columns
//    [r N/n, (r+1) N/n). Each block of the kernel, as soon as its rows are
//    done, puts them into every PE's copy of Y (put_signal from the block:
//    the all-gather is fused into the GEMM, no separate collective, no host
//    round trip), then adds 1 to that PE's arrival counter for this PE;
//  - row-parallel O = Y W2^T + b: PE r multiplies its own columns of Y by
//    its columns of W2, and each block puts its partial rows into slot r of
//    every PE's partial buffer with a signal (a one-shot all-reduce fused
//    into the GEMM); a reduce kernel waits for the n partials of its rows
//    and adds them in PE order.
// Every PE also runs the same layers unsplit (one GPU's linear layer) and
// compares: Y bit for bit (the same dot products in the same order), O
// within 1e-5 relative (the split changes the summation order). It prints
// PASS or FAIL and the time of a split forward.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "nvst/device.cuh"
#include "nvst/error.hpp"
#include "nvst/launch.hpp"
#include "nvst/nvst.hpp"

namespace {

using nvst::dev::Cmp;
using nvst::dev::SignalOp;

constexpr int kB = 64;    // tokens
constexpr int kK = 256;   // input features
constexpr int kN = 512;   // hidden features (split by the column-parallel layer)
constexpr int kM = 256;   // output features
constexpr int kRows = 4;  // rows per block: one put of kRows rows per block and peer

// out[b, j] = sum_k in[b, k] * w[j, k] over rows [row0, row0 + kRows), j in [0, cols).
// The inner order is k = 0..K-1, the same for the split and the unsplit layer.
__device__ void gemm_rows(const float* in, int in_stride, const float* w, int w_stride, int k_len, float* out, int cols,
                          int row0) {
  for (int i = threadIdx.x; i < kRows * cols; i += blockDim.x) {
    const int b = row0 + i / cols, j = i % cols;
    float acc = 0.f;
    for (int k = 0; k < k_len; ++k) acc = fmaf(in[b * in_stride + k], w[j * w_stride + k], acc);
    out[b * cols + j] = acc;
  }
}

// Column-parallel layer with a fused all-gather. y_parts is [n][B][N/n]:
// PE r's columns are slot r on every PE. arrived[r] counts r's blocks.
__global__ void column_parallel_allgather(const float* x, const float* w1_shard, float* y_local, float* y_parts,
                                          std::uint64_t* arrived, int me, int n) {
  const int cols = kN / n, row0 = blockIdx.x * kRows;
  gemm_rows(x, kK, w1_shard, kK, kK, y_local, cols, row0);
  __syncthreads();  // the block's rows are complete before any thread puts them
  const std::size_t off = static_cast<std::size_t>(row0) * cols;
  for (int pe = 0; pe < n; ++pe)
    nvst::dev::putmem_signal_nbi_block(y_parts + static_cast<std::size_t>(me) * kB * cols + off, y_local + off,
                                       sizeof(float) * kRows * cols, arrived + me, 1, SignalOp::kAdd, pe);
}

// Row-parallel layer with a fused one-shot all-reduce: waits for its input
// rows (all PEs' column parts of Y that it multiplies: only its own, which
// it wrote itself, but from every block of its own column kernel), computes
// the partial product and puts it into slot `me` of every PE.
__global__ void row_parallel_partial(const float* y_parts, const float* w2_shard, float* partial_local, float* partials,
                                     std::uint64_t* y_arrived, std::uint64_t* p_arrived, std::uint64_t epoch, int me,
                                     int n) {
  const int k_len = kN / n, row0 = blockIdx.x * kRows;
  if (threadIdx.x == 0) nvst::dev::signal_wait_until(y_arrived + me, Cmp::kGe, epoch * gridDim.x);
  __syncthreads();
  gemm_rows(y_parts + static_cast<std::size_t>(me) * kB * k_len, k_len, w2_shard, k_len, k_len, partial_local, kM,
            row0);
  __syncthreads();
  const std::size_t off = static_cast<std::size_t>(row0) * kM;
  for (int pe = 0; pe < n; ++pe)
    nvst::dev::putmem_signal_nbi_block(partials + static_cast<std::size_t>(me) * kB * kM + off, partial_local + off,
                                       sizeof(float) * kRows * kM, p_arrived + me, 1, SignalOp::kAdd, pe);
}

// O = sum over PEs (in PE order) of the partials + bias, once all arrived.
__global__ void reduce_partials(const float* partials, const float* bias, float* out, std::uint64_t* p_arrived,
                                std::uint64_t expected, int n) {
  if (threadIdx.x == 0)
    for (int pe = 0; pe < n; ++pe) nvst::dev::signal_wait_until(p_arrived + pe, Cmp::kGe, expected);
  __syncthreads();
  const int row0 = blockIdx.x * kRows;
  for (int i = threadIdx.x; i < kRows * kM; i += blockDim.x) {
    const std::size_t at = static_cast<std::size_t>(row0) * kM + i;
    float acc = partials[at];
    for (int pe = 1; pe < n; ++pe) acc += partials[static_cast<std::size_t>(pe) * kB * kM + at];
    out[at] = acc + bias[i % kM];
  }
}

// The unsplit reference: one GPU's linear layer, the same kernel shape.
__global__ void linear_rows(const float* in, const float* w, const float* bias, float* out, int k_len, int cols) {
  gemm_rows(in, k_len, w, k_len, k_len, out, cols, blockIdx.x * kRows);
  __syncthreads();
  if (bias)
    for (int i = threadIdx.x; i < kRows * cols; i += blockDim.x) out[blockIdx.x * kRows * cols + i] += bias[i % cols];
}

std::vector<float> random_vec(std::size_t n, unsigned seed) {
  std::vector<float> v(n);
  unsigned s = seed * 2654435761u + 1;
  for (auto& x : v) {
    s = s * 1664525u + 1013904223u;
    x = static_cast<float>((s >> 8) & 0xffff) / 65536.f - 0.5f;
  }
  return v;
}

float* device_copy(const std::vector<float>& h, float* d = nullptr) {
  if (!d) NVST_CHECK_CUDA(cudaMalloc(&d, h.size() * sizeof(float)));
  NVST_CHECK_CUDA(cudaMemcpy(d, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice));
  return d;
}

std::vector<float> host_copy(const float* d, std::size_t n) {
  std::vector<float> h(n);
  NVST_CHECK_CUDA(cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
  return h;
}

int run_pe() {
  nvst::init();
  const int me = nvst::my_pe(), n = nvst::n_pes();
  if (kN % n || kB % kRows) {
    std::fprintf(stderr, "tensor_parallel: %d PEs do not split %d hidden features\n", n, kN);
    return 2;
  }
  const int hid = kN / n, blocks = kB / kRows;
  // The whole model, the same on every PE (same seeds); each PE takes its shard.
  const auto x = random_vec(kB * kK, 1), w1 = random_vec(kN * kK, 2), w2 = random_vec(kM * kN, 3),
             b2 = random_vec(kM, 4);
  std::vector<float> w1_shard(w1.begin() + me * hid * kK, w1.begin() + (me + 1) * hid * kK), w2_shard(kM * hid);
  for (int j = 0; j < kM; ++j)
    for (int k = 0; k < hid; ++k) w2_shard[j * hid + k] = w2[j * kN + me * hid + k];
  float *d_x = device_copy(x), *d_w1s = device_copy(w1_shard), *d_w2s = device_copy(w2_shard), *d_b2 = device_copy(b2),
        *d_w1 = device_copy(w1), *d_w2 = device_copy(w2);
  // Symmetric: what peers write into, and what the device puts read.
  auto* y_local = static_cast<float*>(nvst::malloc(sizeof(float) * kB * hid));
  auto* y_parts = static_cast<float*>(nvst::malloc(sizeof(float) * n * kB * hid));
  auto* p_local = static_cast<float*>(nvst::malloc(sizeof(float) * kB * kM));
  auto* partials = static_cast<float*>(nvst::malloc(sizeof(float) * n * kB * kM));
  auto* y_arrived = static_cast<std::uint64_t*>(nvst::calloc(n, sizeof(std::uint64_t)));
  auto* p_arrived = static_cast<std::uint64_t*>(nvst::calloc(n, sizeof(std::uint64_t)));
  float *d_out = nullptr, *ref_y = nullptr, *ref_o = nullptr;
  NVST_CHECK_CUDA(cudaMalloc(&d_out, sizeof(float) * kB * kM));
  NVST_CHECK_CUDA(cudaMalloc(&ref_y, sizeof(float) * kB * kN));
  NVST_CHECK_CUDA(cudaMalloc(&ref_o, sizeof(float) * kB * kM));
  nvst::barrier_all();

  std::uint64_t epoch = 0;
  auto forward = [&] {
    ++epoch;
    column_parallel_allgather<<<blocks, 256>>>(d_x, d_w1s, y_local, y_parts, y_arrived, me, n);
    NVST_CHECK_LAUNCH();
    row_parallel_partial<<<blocks, 256>>>(y_parts, d_w2s, p_local, partials, y_arrived, p_arrived, epoch, me, n);
    NVST_CHECK_LAUNCH();
    reduce_partials<<<blocks, 256>>>(partials, d_b2, d_out, p_arrived, epoch * blocks, n);
    NVST_CHECK_LAUNCH();
    // The next forward overwrites every PE's slots: all must have read them.
    nvst::barrier_all_on_stream(nullptr);
  };
  forward();
  NVST_CHECK_CUDA(cudaDeviceSynchronize());
  linear_rows<<<blocks, 256>>>(d_x, d_w1, nullptr, ref_y, kK, kN);
  NVST_CHECK_LAUNCH();
  linear_rows<<<blocks, 256>>>(ref_y, d_w2, d_b2, ref_o, kN, kM);
  NVST_CHECK_LAUNCH();
  NVST_CHECK_CUDA(cudaDeviceSynchronize());

  const auto got_parts = host_copy(y_parts, static_cast<std::size_t>(n) * kB * hid);
  const auto want_y = host_copy(ref_y, kB * kN);
  int y_wrong = 0;
  for (int r = 0; r < n; ++r)
    for (int b = 0; b < kB; ++b)
      for (int j = 0; j < hid; ++j)
        y_wrong += got_parts[(static_cast<std::size_t>(r) * kB + b) * hid + j] != want_y[b * kN + r * hid + j];
  const auto got_o = host_copy(d_out, kB * kM), want_o = host_copy(ref_o, kB * kM);
  double err = 0, mag = 0;
  for (int i = 0; i < kB * kM; ++i) {
    err = std::fmax(err, std::fabs(got_o[i] - want_o[i]));
    mag = std::fmax(mag, std::fabs(want_o[i]));
  }
  const bool ok = y_wrong == 0 && err <= 1e-5 * mag;

  cudaEvent_t e0, e1;
  NVST_CHECK_CUDA(cudaEventCreate(&e0));
  NVST_CHECK_CUDA(cudaEventCreate(&e1));
  constexpr int kIters = 50;
  NVST_CHECK_CUDA(cudaEventRecord(e0));
  for (int i = 0; i < kIters; ++i) forward();
  NVST_CHECK_CUDA(cudaEventRecord(e1));
  NVST_CHECK_CUDA(cudaEventSynchronize(e1));
  float ms = 0;
  NVST_CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
  std::printf(
      "[PE %d] %s column-parallel all-gather (%d wrong of %d) and row-parallel all-reduce (max error "
      "%.3g of %.3g); split forward %.1f us per call (including a barrier), %d PEs\n",
      me, ok ? "PASS" : "FAIL", y_wrong, kB * kN, err, mag, ms * 1e3 / kIters, n);
  nvst::barrier_all();
  for (void* p : {static_cast<void*>(y_local), static_cast<void*>(y_parts), static_cast<void*>(p_local),
                  static_cast<void*>(partials), static_cast<void*>(y_arrived), static_cast<void*>(p_arrived)})
    nvst::free(p);
  for (float* p : {d_x, d_w1s, d_w2s, d_b2, d_w1, d_w2, d_out, ref_y, ref_o}) NVST_CHECK_CUDA(cudaFree(p));
  nvst::finalize();
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  int np = 2;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--np" && i + 1 < argc) {
      np = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--np N]\n", argv[0]);
      return 2;
    }
  }
  try {
    if (nvst::is_pe_process()) return run_pe();
    int gpus = 0;
    if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus < 1) {
      std::printf("tensor_parallel: no GPU visible\n");
      return 77;
    }
    const char* share = std::getenv("NVST_TEST_SHARE_GPUS");
    if (gpus < np && !(share && std::string(share) == "1")) {
      std::printf("tensor_parallel: %d PEs need %d GPUs (NVST_TEST_SHARE_GPUS=1 shares them)\n", np, np);
      return 77;
    }
    return nvst::spawn_and_wait({np, std::vector<std::string>(argv, argv + argc), {}, 15});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tensor_parallel: %s\n", e.what());
    return 1;
  }
}
