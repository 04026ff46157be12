// What the fabric transport (libfabric, between nodes and host-memory PEs)
// finds on this machine, for tools that describe it (`nvst info`) and tests
// that clean up after a killed PE.
#pragma once

#include <string>
#include <vector>

namespace nvst::fabric {

// Names of the providers libfabric offers for RDM endpoints here.
std::vector<std::string> providers_present();
// The provider NVST_FABRIC_PROVIDER asks for, or the default choice.
std::string chosen_provider();
// The regions libfabric's shm made for process `pid` (/dev/shm/<pid>:...).
// shm removes one only when its endpoint is closed, so a killed process
// leaves them behind (and a later process with the same pid meets them).
std::vector<std::string> shm_region_paths(int pid);

}  // namespace nvst::fabric
