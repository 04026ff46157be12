// Latency of one cudaMemcpyAsync (pinned host <-> device) seen by a thread that polls its event,
// as the proxy does: issue, record, poll cudaEventQuery until done. Median of 200.
#include <cuda_runtime.h>
#include <chrono>
#include <cstdio>
#include <algorithm>
#include <vector>
#include <thread>
#include <cstring>
#define CK(x) do { cudaError_t rc_ = (x); if (rc_ != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(rc_)); return 1; } } while (0)
int main(int argc, char** argv) {
  const char* tag = argc > 1 ? argv[1] : "";
  const int gap_us = argc > 2 ? atoi(argv[2]) : 0;  // idle time before each copy
  const int burst = argc > 3 ? atoi(argv[3]) : 1;   // copies queued at once; the first is timed
  char *h, *d; CK(cudaHostAlloc(&h, 1 << 20, 0)); CK(cudaMalloc(&d, 1 << 20));
  cudaStream_t s; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t e; CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  for (int dir = 0; dir < 2; ++dir)
    for (size_t bytes : {size_t(4096), size_t(16384), size_t(65536), size_t(262144)}) {
      std::vector<double> us;
      for (int i = 0; i < 220; ++i) {
        if (gap_us) { auto g0 = std::chrono::steady_clock::now(); while (std::chrono::steady_clock::now() - g0 < std::chrono::microseconds(gap_us)) {} }
        auto t0 = std::chrono::steady_clock::now();
        for (int b = 0; b < burst; ++b) {
          if (dir == 0) CK(cudaMemcpyAsync(h + (b % 4) * 262144, d + (b % 4) * 262144, bytes, cudaMemcpyDeviceToHost, s));
          else CK(cudaMemcpyAsync(d + (b % 4) * 262144, h + (b % 4) * 262144, bytes, cudaMemcpyHostToDevice, s));
          if (b == 0) CK(cudaEventRecord(e, s));
        }
        while (cudaEventQuery(e) == cudaErrorNotReady) {}
        CK(cudaStreamSynchronize(s));
        if (i >= 20) us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
      }
      std::sort(us.begin(), us.end());
      printf("%s gap %d burst %d %s %7zu bytes: median %.1f us, p10 %.1f, p90 %.1f\n", tag, gap_us, burst, dir ? "H2D" : "D2H", bytes, us[us.size() / 2], us[us.size() / 10], us[us.size() * 9 / 10]);
    }
  return 0;
}
