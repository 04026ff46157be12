// Probe: what one LogFMT row encode costs, alone (one warp, one row: its
// latency) and in bulk (1024 rows, a warp each), against the bf16 copy of
// the same rows; the kernels' own code, included.
#include "ep/low_latency.cu"
#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>
using namespace nvst::ep::detail;
__global__ void enc(char* dst, const __nv_bfloat16* src, int rows, int hidden, std::size_t slot, int mode) {
  __shared__ int4 stage[16][32];
  const int warp = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
  for (int r = warp; r < rows; r += gridDim.x * (blockDim.x / 32)) {
    if (mode == 0) warp_logfmt_encode_row(dst + r * slot, src + static_cast<std::size_t>(r) * hidden, hidden, lane, reinterpret_cast<char*>(stage[threadIdx.x / 32]));
    else { char* d = dst + r * slot; warp_copy_row_multi<1>(&d, 1, reinterpret_cast<const char*>(src + static_cast<std::size_t>(r) * hidden), hidden * 2); }
  }
}
int main() {
  const int H = 7168, N = 1024;
  const std::size_t slot = ll_combine_slot_bytes(H);
  std::vector<__nv_bfloat16> x(static_cast<std::size_t>(N) * H);
  std::mt19937 rng(3);
  for (auto& v : x) v = __float2bfloat16((static_cast<int>(rng() % 2001) - 1000) / 1000.0f);
  __nv_bfloat16* dx; char* d;
  cudaMalloc(&dx, x.size() * 2); cudaMalloc(&d, N * slot);
  cudaMemcpy(dx, x.data(), x.size() * 2, cudaMemcpyHostToDevice);
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  auto run = [&](int blocks, int threads, int rows, int mode) {
    std::vector<float> t;
    for (int i = 0; i < 60; ++i) {
      cudaEventRecord(a); enc<<<blocks, threads>>>(d, dx, rows, H, slot, mode); cudaEventRecord(b); cudaEventSynchronize(b);
      float ms; cudaEventElapsedTime(&ms, a, b); if (i >= 10) t.push_back(ms * 1000);
    }
    std::sort(t.begin(), t.end());
    if (cudaGetLastError() != cudaSuccess) std::printf("error\n");
    return t[t.size() / 2];
  };
  std::printf("one warp, one row:   logfmt %7.1f us  bf16 %7.1f us\n", run(1, 32, 1, 0), run(1, 32, 1, 1));
  std::printf("one warp, 4 rows:    logfmt %7.1f us  bf16 %7.1f us\n", run(1, 32, 4, 0), run(1, 32, 4, 1));
  std::printf("1024 rows, %d x 512: logfmt %7.1f us  bf16 %7.1f us\n", sms, run(sms, 512, N, 0), run(sms, 512, N, 1));
  std::printf("1024 rows, 64 x 512 (2 rows a warp over half the SMs): logfmt %7.1f us\n", run(64, 512, N, 0));
  return 0;
}
