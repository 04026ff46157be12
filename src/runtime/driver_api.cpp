#include "runtime/driver_api.hpp"

#include <cuda_runtime_api.h>

#include <string>

#include "nvst/error.hpp"

namespace nvst::driver {

namespace {
template <typename F>
void load(F& fn, const char* name) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult status{};
  NVST_CHECK_CUDA(cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &status));
  NVST_REQUIRE(p != nullptr && status == cudaDriverEntryPointSuccess, "CUDA driver entry point ", name,
               " not found (driver too old?)");
  fn = reinterpret_cast<F>(p);
}

Api load_all() {
  Api a{};
  load(a.GetErrorName, "cuGetErrorName");
  load(a.GetErrorString, "cuGetErrorString");
  load(a.MemCreate, "cuMemCreate");
  load(a.MemRelease, "cuMemRelease");
  load(a.MemMap, "cuMemMap");
  load(a.MemUnmap, "cuMemUnmap");
  load(a.MemSetAccess, "cuMemSetAccess");
  load(a.MemAddressReserve, "cuMemAddressReserve");
  load(a.MemAddressFree, "cuMemAddressFree");
  load(a.MemGetAllocationGranularity, "cuMemGetAllocationGranularity");
  load(a.MemExportToShareableHandle, "cuMemExportToShareableHandle");
  load(a.MemImportFromShareableHandle, "cuMemImportFromShareableHandle");
  load(a.FuncGetModule, "cuFuncGetModule");
  load(a.StreamWriteValue64, "cuStreamWriteValue64");
  return a;
}
}  // namespace

const Api& api() {
  static const Api a = load_all();
  return a;
}

void throw_cu_error(const char* call, CUresult rc, const char* file, int line) {
  const char* name = nullptr;
  const char* text = nullptr;
  const Api& a = api();
  a.GetErrorName(rc, &name);
  a.GetErrorString(rc, &text);
  detail::throw_cuda_error(call, static_cast<int>(rc), name, text, file, line);
}

}  // namespace nvst::driver
