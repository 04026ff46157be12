// See bench.hpp: pes_sharing_a_gpu.
#include "bench.hpp"
#include "nvst/error.hpp"
#include "nvst/nvst.hpp"

namespace nvst::tools {

std::string pes_sharing_a_gpu() {
  const int n = nvst::n_pes();
  for (int a = 0; a < n; ++a)
    for (int b = a + 1; b < n; ++b)
      if (const std::string g = nvst::gpu_of(a); !g.empty() && g == nvst::gpu_of(b))
        return detail::concat("PEs ", a, " and ", b, " are both on GPU ", g);
  return "";
}

}  // namespace nvst::tools
