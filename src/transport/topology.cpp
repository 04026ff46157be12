// hwloc queries for topology.hpp.
#include "nvst/topology.hpp"

#include <hwloc.h>
#include <hwloc/cudart.h>

#include <memory>

#include "nvst/settings.hpp"

namespace nvst::topology {

namespace {

// One topology per process, with I/O devices (GPUs, NICs) loaded.
hwloc_topology_t topo() {
  static hwloc_topology_t t = [] {
    hwloc_topology_t x = nullptr;
    if (hwloc_topology_init(&x) != 0) return static_cast<hwloc_topology_t>(nullptr);
    hwloc_topology_set_io_types_filter(x, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    if (hwloc_topology_load(x) != 0) {
      hwloc_topology_destroy(x);
      return static_cast<hwloc_topology_t>(nullptr);
    }
    return x;
  }();
  return t;
}

struct Bitmap {
  hwloc_bitmap_t b = hwloc_bitmap_alloc();
  ~Bitmap() { hwloc_bitmap_free(b); }
};

std::string list(hwloc_const_bitmap_t set) {
  char* s = nullptr;
  if (hwloc_bitmap_list_asprintf(&s, set) < 0 || s == nullptr) return "";
  std::string out(s);
  std::free(s);
  return out;
}

// The first non-I/O ancestor of the GPU (its package or NUMA node side).
hwloc_obj_t gpu_anchor(int device) {
  hwloc_topology_t t = topo();
  if (t == nullptr) return nullptr;
  hwloc_obj_t pcidev = hwloc_cudart_get_device_pcidev(t, device);
  return pcidev ? hwloc_get_non_io_ancestor_obj(t, pcidev) : nullptr;
}

}  // namespace

std::string cores_near_gpu(int device) {
  hwloc_topology_t t = topo();
  if (t == nullptr) return "";
  Bitmap set;
  if (hwloc_cudart_get_device_cpuset(t, device, set.b) != 0 || hwloc_bitmap_iszero(set.b)) return "";
  return list(set.b);
}

std::string bind_thread_near_gpu(int device) {
  if (settings::get("NVST_PROXY_CPU_BIND").value_or("1") == "0") return "";
  hwloc_topology_t t = topo();
  if (t == nullptr) return "";
  Bitmap set;
  if (hwloc_cudart_get_device_cpuset(t, device, set.b) != 0 || hwloc_bitmap_iszero(set.b)) return "";
  // The whole machine is no preference at all: leave the thread alone.
  if (hwloc_bitmap_isequal(set.b, hwloc_topology_get_topology_cpuset(t))) return "";
  if (hwloc_set_cpubind(t, set.b, HWLOC_CPUBIND_THREAD) != 0) return "";
  return list(set.b);
}

std::vector<std::string> network_devices_near_gpu(int device) {
  std::vector<std::string> out;
  hwloc_topology_t t = topo();
  hwloc_obj_t anchor = gpu_anchor(device);
  if (t == nullptr) return out;
  for (hwloc_obj_t o = hwloc_get_next_osdev(t, nullptr); o; o = hwloc_get_next_osdev(t, o)) {
    if (o->attr->osdev.type != HWLOC_OBJ_OSDEV_NETWORK && o->attr->osdev.type != HWLOC_OBJ_OSDEV_OPENFABRICS) continue;
    hwloc_obj_t a = hwloc_get_non_io_ancestor_obj(t, o);
    const bool near = anchor && a && hwloc_bitmap_isincluded(a->cpuset, anchor->cpuset);
    out.push_back(std::string(o->name ? o->name : "?") + (near ? " (near)" : ""));
  }
  return out;
}

int nearest_network(int device, const std::vector<std::string>& names) {
  hwloc_topology_t t = topo();
  hwloc_obj_t anchor = gpu_anchor(device);
  if (t == nullptr || anchor == nullptr || names.size() < 2) return 0;
  int best = 0, best_depth = -1;
  for (std::size_t i = 0; i < names.size(); ++i) {
    for (hwloc_obj_t o = hwloc_get_next_osdev(t, nullptr); o; o = hwloc_get_next_osdev(t, o)) {
      if (o->name == nullptr || names[i].find(o->name) == std::string::npos) continue;
      hwloc_obj_t a = hwloc_get_non_io_ancestor_obj(t, o);
      hwloc_obj_t common = a ? hwloc_get_common_ancestor_obj(t, a, anchor) : nullptr;
      if (common && static_cast<int>(common->depth) > best_depth) {
        best_depth = static_cast<int>(common->depth);
        best = static_cast<int>(i);
      }
    }
  }
  return best;
}

}  // namespace nvst::topology
