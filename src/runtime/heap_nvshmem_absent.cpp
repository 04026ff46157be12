// The NVSHMEM backend in a library built without it (nvst::nvst). nvst::init
// refuses NVST_BACKEND=nvshmem first, with the message that says how to get
// it; these only satisfy the linker and fail loudly should that ever change.
#include "nvst/error.hpp"
#include "runtime/heap_backing.hpp"

namespace nvst {

namespace {
[[noreturn]] void absent(const char* what) { NVST_FAIL(what, ": this program has no NVSHMEM backend"); }
}  // namespace

bool nvshmem_backend_built() { return false; }
std::string nvshmem_backend_version() { return ""; }
std::unique_ptr<HeapBacking> make_nvshmem_heap(std::size_t, const NodeContext&, int) { absent("nvst::init"); }
namespace nvshmem_ops {
void barrier_all() { absent("barrier_all"); }
void barrier_all_on_stream(cudaStream_t) { absent("barrier_all_on_stream"); }
bool in_heap(const void*, std::size_t) { absent("in_heap"); }
void putmem_on_stream(void*, const void*, std::size_t, int, cudaStream_t) { absent("putmem_on_stream"); }
void getmem_on_stream(void*, const void*, std::size_t, int, cudaStream_t) { absent("getmem_on_stream"); }
void quiet() { absent("quiet"); }
}  // namespace nvshmem_ops

}  // namespace nvst
