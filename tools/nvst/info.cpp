// `nvst info`: what this machine offers the runtime. NVLink counts come from
// NVML, loaded at run time (absent on machines without a driver).
#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "build_info.hpp"
#include "commands.hpp"
#include "nvst/error.hpp"
#include "nvst/nvst.hpp"
#include "nvst/fabric_info.hpp"
#include "nvst/topology.hpp"

namespace nvst::tools {

int gpu_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

namespace {

// The few NVML declarations used here (nvml.h is not in every CUDA install).
struct NvmlPciInfo {
  char bus_id_legacy[16];
  unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
};
using NvmlDevice = void*;

struct Nvml {
  void* lib = nullptr;
  int (*init)() = nullptr;
  int (*by_bus_id)(const char*, NvmlDevice*) = nullptr;
  int (*link_state)(NvmlDevice, unsigned, int*) = nullptr;
  int (*remote_pci)(NvmlDevice, unsigned, NvmlPciInfo*) = nullptr;
  bool ok = false;

  Nvml() {
    lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return;
    init = reinterpret_cast<int (*)()>(dlsym(lib, "nvmlInit_v2"));
    by_bus_id = reinterpret_cast<int (*)(const char*, NvmlDevice*)>(dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
    link_state = reinterpret_cast<int (*)(NvmlDevice, unsigned, int*)>(dlsym(lib, "nvmlDeviceGetNvLinkState"));
    remote_pci = reinterpret_cast<int (*)(NvmlDevice, unsigned, NvmlPciInfo*)>(
        dlsym(lib, "nvmlDeviceGetNvLinkRemotePciInfo_v2"));
    ok = init && by_bus_id && link_state && remote_pci && init() == 0;
  }
};

struct Gpu {
  cudaDeviceProp prop{};
  char bus_id[32] = {};
  int domain = 0, bus = 0, dev = 0;
};

}  // namespace

// The fabric transport (the proxy's, between nodes) and the topology it uses.
void print_fabric(int gpus) {
  auto present = fabric::providers_present();
  std::string list;
  for (auto& p : present) list += (list.empty() ? "" : ", ") + p;
  std::printf(
      "  fabric (proxy thread + libfabric, between nodes and host PEs): provider %s (NVST_FABRIC_PROVIDER)\n"
      "    providers present: %s\n",
      fabric::chosen_provider().c_str(), list.empty() ? "none" : list.c_str());
  for (int g = 0; g < gpus; ++g) {
    std::string nics;
    for (auto& d : topology::network_devices_near_gpu(g)) nics += (nics.empty() ? "" : ", ") + d;
    const std::string cores = topology::cores_near_gpu(g);
    std::printf("    GPU%d: proxy thread on cores %s; network devices: %s\n", g,
                cores.empty() ? "(no preference)" : cores.c_str(), nics.empty() ? "none" : nics.c_str());
  }
}

int info() {
  int rt = 0, drv = 0, nccl = 0;
  cudaRuntimeGetVersion(&rt);
  if (cudaDriverGetVersion(&drv) != cudaSuccess) drv = 0;
  ncclGetVersion(&nccl);
  std::printf("nvst %s (commit %s)\n", "0.1.0", kGitCommit);
  std::printf("CUDA runtime %d.%d, driver %s, NCCL %d.%d.%d\n", rt / 1000, (rt % 1000) / 10,
              drv ? (std::to_string(drv / 1000) + "." + std::to_string((drv % 1000) / 10)).c_str() : "none",
              nccl / 10000, (nccl % 10000) / 100, nccl % 100);
  const int n = gpu_count();
  if (n == 0) {
    std::printf("GPUs: none visible\n");
    std::printf("transports: host (host-memory PEs; no load/store between PEs)\n");
    print_fabric(0);
    return 0;
  }
  std::vector<Gpu> gpus(static_cast<std::size_t>(n));
  std::printf("GPUs: %d\n", n);
  for (int i = 0; i < n; ++i) {
    Gpu& g = gpus[static_cast<std::size_t>(i)];
    NVST_CHECK_CUDA(cudaGetDeviceProperties(&g.prop, i));
    NVST_CHECK_CUDA(cudaDeviceGetPCIBusId(g.bus_id, sizeof(g.bus_id), i));
    NVST_CHECK_CUDA(cudaDeviceGetAttribute(&g.domain, cudaDevAttrPciDomainId, i));
    NVST_CHECK_CUDA(cudaDeviceGetAttribute(&g.bus, cudaDevAttrPciBusId, i));
    NVST_CHECK_CUDA(cudaDeviceGetAttribute(&g.dev, cudaDevAttrPciDeviceId, i));
    std::printf("  GPU%d  %-24s sm_%d%d  %3d SMs  %6.1f GiB  %s\n", i, g.prop.name, g.prop.major, g.prop.minor,
                g.prop.multiProcessorCount, static_cast<double>(g.prop.totalGlobalMem) / (1 << 30), g.bus_id);
  }

  // NVLink links between each pair, from NVML.
  Nvml nvml;
  std::vector<std::vector<int>> links(static_cast<std::size_t>(n), std::vector<int>(static_cast<std::size_t>(n), 0));
  if (nvml.ok) {
    for (int i = 0; i < n; ++i) {
      NvmlDevice d = nullptr;
      if (nvml.by_bus_id(gpus[static_cast<std::size_t>(i)].bus_id, &d) != 0) continue;
      for (unsigned l = 0; l < 18; ++l) {
        int active = 0;
        if (nvml.link_state(d, l, &active) != 0 || !active) continue;
        NvmlPciInfo pci{};
        if (nvml.remote_pci(d, l, &pci) != 0) continue;
        for (int j = 0; j < n; ++j) {
          const Gpu& o = gpus[static_cast<std::size_t>(j)];
          if (static_cast<int>(pci.domain) == o.domain && static_cast<int>(pci.bus) == o.bus &&
              static_cast<int>(pci.device) == o.dev)
            ++links[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)];
        }
      }
    }
  }
  std::printf("\npeer access (P2P) and NVLink links (NVn; '-' = no peer access)%s\n",
              nvml.ok ? "" : " [NVML unavailable: link counts unknown]");
  std::printf("        ");
  for (int j = 0; j < n; ++j) std::printf("  GPU%-3d", j);
  std::printf("\n");
  int p2p_pairs = 0;
  for (int i = 0; i < n; ++i) {
    std::printf("  GPU%-3d", i);
    for (int j = 0; j < n; ++j) {
      if (i == j) {
        std::printf("  %-6s", "X");
        continue;
      }
      int can = 0;
      NVST_CHECK_CUDA(cudaDeviceCanAccessPeer(&can, i, j));
      p2p_pairs += can;
      int l = links[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)];
      std::string cell = !can ? "-" : (l ? "NV" + std::to_string(l) : (nvml.ok ? "P2P" : "P2P?"));
      std::printf("  %-6s", cell.c_str());
    }
    std::printf("\n");
  }
  std::printf("\ntransports:\n");
  std::printf("  nvlink (cuMem + fd passing, load/store and copy engine): %s\n",
              n >= 2 && p2p_pairs > 0 ? "available" : "needs 2 GPUs with peer access");
  std::printf("  cudaipc (legacy CUDA IPC fallback, NVST_HEAP=cudaipc):   %s\n",
              n >= 2 && p2p_pairs > 0 ? "available" : "needs 2 GPUs with peer access");
  std::printf("  host (host-memory PEs, NVST_HEAP=host):                  available\n");
  print_fabric(n);
  std::printf(
      "\nsettings: NVST_SYMMETRIC_SIZE (heap per PE, default 1G), NVST_TIMEOUT_S (%g),\n"
      "          NVST_DEVICE_TIMEOUT_S (%g), NVST_HEAP, NVST_NODE_SIZE\n",
      host_timeout_seconds(), device_timeout_seconds());
  return 0;
}

}  // namespace nvst::tools
