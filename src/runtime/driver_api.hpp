// CUDA driver entry points, fetched through the runtime
// (cudaGetDriverEntryPointByVersion) instead of linking libcuda: binaries then
// start on machines with no driver at all (CI) and report "no GPU".
#pragma once

#include <cuda.h>

namespace nvst::driver {

struct Api {
  decltype(&::cuGetErrorName) GetErrorName;
  decltype(&::cuGetErrorString) GetErrorString;
  decltype(&::cuMemCreate) MemCreate;
  decltype(&::cuMemRelease) MemRelease;
  decltype(&::cuMemMap) MemMap;
  decltype(&::cuMemUnmap) MemUnmap;
  decltype(&::cuMemSetAccess) MemSetAccess;
  decltype(&::cuMemAddressReserve) MemAddressReserve;
  decltype(&::cuMemAddressFree) MemAddressFree;
  decltype(&::cuMemGetAllocationGranularity) MemGetAllocationGranularity;
  decltype(&::cuMemExportToShareableHandle) MemExportToShareableHandle;
  decltype(&::cuMemImportFromShareableHandle) MemImportFromShareableHandle;
  decltype(&::cuFuncGetModule) FuncGetModule;
  decltype(&::cuStreamWriteValue64) StreamWriteValue64;
};

// Loaded on first use (after the runtime has a context); throws if a symbol
// is missing.
const Api& api();

[[noreturn]] void throw_cu_error(const char* call, CUresult rc, const char* file, int line);

}  // namespace nvst::driver

#define NVST_CHECK_CU(call) \
  do { \
    CUresult nvst_rc_ = (call); \
    if (nvst_rc_ != CUDA_SUCCESS) ::nvst::driver::throw_cu_error(#call, nvst_rc_, __FILE__, __LINE__); \
  } while (0)
