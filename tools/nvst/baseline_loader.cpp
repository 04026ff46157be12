#include "baseline_loader.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "nvst/nvst.hpp"

namespace nvst::tools {

namespace {
std::string python_nvshmem_lib() {
  FILE* p = ::popen(
      "python3 -c 'import nvidia,os;print(os.path.join(list(nvidia.__path__)[0],\"nvshmem\",\"lib\"))' 2>/dev/null",
      "r");
  if (!p) return "";
  char buf[1024] = {};
  std::string out = std::fgets(buf, sizeof buf, p) ? buf : "";
  ::pclose(p);
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}
}  // namespace

void bootstrap_broadcast_cb(void* data, std::size_t bytes, int root) { nvst::bootstrap_broadcast(data, bytes, root); }

NvshmemBaseline load_nvshmem_baseline() {
  NvshmemBaseline b;
  if (nvst::nvshmem_backend_built()) {  // a second NVSHMEM in one process: no
    b.why_not = "nvst_nvshmem links NVSHMEM itself; NVSHMEM's own columns come from plain nvst";
    return b;
  }
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path exe_dir = fs::read_symlink("/proc/self/exe", ec).parent_path();
  fs::path plugin = exe_dir / "libnvst_nvshmem_baseline.so";
  if (!fs::exists(plugin)) {
    b.why_not = "nvst was built without NVSHMEM (no " + plugin.string() + ")";
    return b;
  }
  std::string libdir =
      std::getenv("NVSHMEM_DIR") ? std::string(std::getenv("NVSHMEM_DIR")) + "/lib" : python_nvshmem_lib();
  std::string host = libdir + "/libnvshmem_host.so.3";
  if (libdir.empty() || !::dlopen(host.c_str(), RTLD_NOW | RTLD_GLOBAL)) {
    b.why_not = "cannot load NVSHMEM's host library " + host +
                " (set NVSHMEM_DIR or pip install nvidia-nvshmem-cu13==3.4.5): " + (dlerror() ? dlerror() : "");
    return b;
  }
  void* h = ::dlopen(plugin.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    b.why_not = std::string("cannot load ") + plugin.string() + ": " + dlerror();
    return b;
  }
  auto sym = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(h, name));
    if (!fn && b.why_not.empty()) b.why_not = std::string("plugin lacks ") + name;
  };
  sym(b.init, "nvstb_init");
  sym(b.malloc, "nvstb_malloc");
  sym(b.free, "nvstb_free");
  sym(b.put, "nvstb_put");
  sym(b.pingpong, "nvstb_pingpong");
  sym(b.barrier_all, "nvstb_barrier_all");
  sym(b.coll_supported, "nvstb_coll_supported");
  sym(b.coll_max_bytes, "nvstb_coll_max_bytes");
  sym(b.collective, "nvstb_collective");
  sym(b.finalize, "nvstb_finalize");
  sym(b.version, "nvstb_version");
  return b;
}

}  // namespace nvst::tools
