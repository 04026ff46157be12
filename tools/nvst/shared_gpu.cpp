// See bench.hpp: pes_sharing_a_gpu.
#include <cuda_runtime_api.h>

#include <cstring>
#include <vector>

#include "bench.hpp"
#include "nvst/error.hpp"
#include "nvst/nvst.hpp"

namespace nvst::tools {

std::string pes_sharing_a_gpu() {
  char bus[32] = {};
  NVST_CHECK_CUDA(cudaDeviceGetPCIBusId(bus, sizeof(bus), nvst::device()));
  const std::vector<std::byte> all = nvst::bootstrap_allgather(bus, sizeof(bus));
  const int n = nvst::n_pes();
  auto of = [&](int pe) { return reinterpret_cast<const char*>(all.data()) + static_cast<std::size_t>(pe) * sizeof(bus); };
  for (int a = 0; a < n; ++a)
    for (int b = a + 1; b < n; ++b)
      if (std::strncmp(of(a), of(b), sizeof(bus)) == 0)
        return detail::concat("PEs ", a, " and ", b, " are both on GPU ", of(a));
  return "";
}

}  // namespace nvst::tools
