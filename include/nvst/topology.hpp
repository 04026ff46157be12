// Where things sit in the machine (hwloc): the cores near a GPU, to pin its
// PE's proxy thread there (the thread touches the GPU's pinned FIFO and
// staging memory all the time), and which of several network domains is
// nearest a GPU. Best effort: without hwloc information every answer is
// "no preference" and nothing is pinned.
#pragma once

#include <string>
#include <vector>

namespace nvst::topology {

// The cores near CUDA device `device` as a list ("0-15,32-47"), or "".
std::string cores_near_gpu(int device);
// Binds the calling thread to those cores; returns what it bound to ("" if
// nothing was done). NVST_PROXY_CPU_BIND=0 turns it off.
std::string bind_thread_near_gpu(int device);
// Of the network devices `names` (libfabric domain names such as
// "rdmap16s27" or "mlx5_0", or interface names), the index of the one
// nearest the GPU, or 0 when there is no information.
int nearest_network(int device, const std::vector<std::string>& names);
// Network and OpenFabrics devices hwloc sees, with the GPU each is nearest.
std::vector<std::string> network_devices_near_gpu(int device);

}  // namespace nvst::topology
