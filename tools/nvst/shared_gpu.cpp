// See bench.hpp: pes_sharing_a_gpu.
#include <cuda_runtime_api.h>

#include <cstring>
#include <vector>

#include "bench.hpp"
#include "nvst/error.hpp"
#include "nvst/nvst.hpp"

namespace nvst::tools {

std::string pes_sharing_a_gpu() {
  // By UUID, not PCI bus id: identical hosts of a job have GPUs on the same
  // bus ids. The bus id names the GPU in the message.
  struct Gpu {
    char uuid[16];
    char bus[32];
  } mine{};
  cudaDeviceProp prop{};
  NVST_CHECK_CUDA(cudaGetDeviceProperties(&prop, nvst::device()));
  std::memcpy(mine.uuid, prop.uuid.bytes, sizeof(mine.uuid));
  NVST_CHECK_CUDA(cudaDeviceGetPCIBusId(mine.bus, sizeof(mine.bus), nvst::device()));
  const std::vector<std::byte> all = nvst::bootstrap_allgather(&mine, sizeof(mine));
  const int n = nvst::n_pes();
  std::vector<Gpu> gpus(static_cast<std::size_t>(n));
  std::memcpy(gpus.data(), all.data(), all.size());
  for (int a = 0; a < n; ++a)
    for (int b = a + 1; b < n; ++b)
      if (std::memcmp(gpus[a].uuid, gpus[b].uuid, sizeof(mine.uuid)) == 0)
        return detail::concat("PEs ", a, " and ", b, " are both on GPU ", gpus[a].bus);
  return "";
}

}  // namespace nvst::tools
