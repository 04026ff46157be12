// nvshmem_tutorial._nvst: the runtime's host API and collectives for Python,
// torch-free (numpy arrays on host-memory PEs). This is the part CI builds
// and tests; GPU tensors come with the PyTorch extension.
// nvst::Error becomes RuntimeError with the library's message; bad Python
// arguments raise ValueError / TypeError naming what was wrong.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "bindings_common.hpp"
#include "nvst/coll.hpp"
#include "nvst/nvst.hpp"

namespace py = pybind11;
using nvst_py::cmp_of;
using nvst_py::op_of;
using nvst_py::team_of;

namespace {

// A symmetric allocation: the same offset on every PE.
struct Symmetric {
  void* ptr = nullptr;
  std::size_t nbytes = 0;
};

// Holds a host heap's memory for a numpy view (nvst::heap_lease).
struct HeapLease {
  std::shared_ptr<void> memory;
};

void require_host_heap(const char* fn) {
  if (nvst::device() >= 0)
    throw py::value_error(std::string("nvshmem_tutorial.") + fn +
                          ": this build's Python API works on host-memory PEs (NVST_HEAP=host); GPU tensors need "
                          "the PyTorch extension");
}

// The library's dtype for a numpy array, checking that it is usable.
nvst::coll::DType dtype_of(const py::array& a, const char* fn, const char* name) {
  if (!(a.flags() & py::array::c_style))
    throw py::value_error(std::string("nvshmem_tutorial.") + fn + ": " + name + " is not C-contiguous");
  if (a.dtype().is(py::dtype::of<float>())) return nvst::coll::DType::kF32;
  if (a.dtype().is(py::dtype::of<std::int32_t>())) return nvst::coll::DType::kI32;
  if (a.dtype().is(py::dtype::of<std::int64_t>())) return nvst::coll::DType::kI64;
  if (a.dtype().is(py::dtype("float16"))) return nvst::coll::DType::kF16;
  throw py::type_error(std::string("nvshmem_tutorial.") + fn + ": " + name + " has dtype " +
                       std::string(py::str(a.dtype())) + "; supported: float32, float16, int32, int64");
}

// Raw puts move bytes: any dtype, but contiguous.
void require_contiguous(const py::array& a, const char* fn, const char* name) {
  if (!(a.flags() & py::array::c_style))
    throw py::value_error(std::string("nvshmem_tutorial.") + fn + ": " + name + " is not C-contiguous");
}

void same_dtype(const py::array& a, const py::array& b, const char* fn) {
  if (!a.dtype().is(b.dtype()))
    throw py::type_error(std::string("nvshmem_tutorial.") + fn + ": input and output dtypes differ (" +
                         std::string(py::str(a.dtype())) + " vs " + std::string(py::str(b.dtype())) + ")");
}

// A collective's input and output: usable arrays of the same dtype.
nvst::coll::DType pair_dtype(const py::array& in, const py::array& out, const char* fn) {
  require_host_heap(fn);
  const auto t = dtype_of(in, fn, "input");
  dtype_of(out, fn, "output");
  same_dtype(in, out, fn);
  return t;
}

// Signal word `index` of s (no overflow however large the index).
void check_word(const Symmetric& s, std::size_t index, const char* fn) {
  if (index >= s.nbytes / 8)
    throw py::value_error(std::string("nvshmem_tutorial.") + fn + ": signal index " + std::to_string(index) +
                          " out of range [0, " + std::to_string(s.nbytes / 8) + ")");
}

void check_range(const Symmetric& s, std::size_t offset, std::size_t bytes, const char* fn) {
  if (offset > s.nbytes || bytes > s.nbytes - offset)
    throw py::value_error(std::string("nvshmem_tutorial.") + fn + ": " + std::to_string(bytes) + " bytes at offset " +
                          std::to_string(offset) + " exceed the symmetric buffer of " + std::to_string(s.nbytes) +
                          " bytes");
}

// A Python backend choice: "" leaves it to NVST_BACKEND (the runtime's
// default), "nvst" or "nvshmem" pick one; anything else, or NVSHMEM where
// this build has none, raises ValueError naming `fn`.
void check_backend(const std::string& backend, const char* fn) {
  if (!backend.empty() && backend != "nvst" && backend != "nvshmem")
    throw py::value_error(std::string("nvshmem_tutorial.") + fn + ": backend '" + backend +
                          "' is not one of 'nvst', 'nvshmem'");
  if (backend == "nvshmem" && !nvst::nvshmem_backend_built())
    throw py::value_error(std::string("nvshmem_tutorial.") + fn +
                          ": backend 'nvshmem' is not in this build (it was built without NVSHMEM: "
                          "pip install nvidia-nvshmem-cu13==3.4.5, then rebuild)");
}

nvst::InitOptions init_options(const std::string& backend, const char* fn) {
  check_backend(backend, fn);
  nvst::InitOptions o;
  o.backend = backend;
  return o;
}

}  // namespace

PYBIND11_MODULE(_nvst, m) {
  m.doc() = "NVSHMEM-Tutorial runtime: host API, numpy collectives (host heaps), device addresses (GPU heaps)";
  py::register_exception<nvst::Error>(m, "NvstError", PyExc_RuntimeError);
  nvst_py::bind_device(m);
  nvst_py::bind_ep(m);
  nvst_py::bind_structures(m);

  m.def(
      "get_unique_id",
      [](const std::string& host) { return host.empty() ? nvst::new_loopback_unique_id() : nvst::new_unique_id(host); },
      py::arg("host") = "",
      "A unique ID for a new job whose rank 0 is this process (pass it to every PE). host: this host's "
      "address as the other PEs reach it; empty = every PE runs on this host (loopback).");
  m.def(
      "init_with_unique_id",
      [](const std::string& uid, int rank, int nranks, const std::string& backend) {
        if (nranks < 1 || rank < 0 || rank >= nranks)
          throw py::value_error("nvshmem_tutorial.init_with_unique_id: rank " + std::to_string(rank) +
                                " out of range for " + std::to_string(nranks) + " ranks");
        const nvst::InitOptions options = init_options(backend, "init_with_unique_id");
        ::setenv("NVST_UNIQUE_ID", uid.c_str(), 1);
        ::setenv("NVST_RANK", std::to_string(rank).c_str(), 1);
        ::setenv("NVST_WORLD_SIZE", std::to_string(nranks).c_str(), 1);
        ::setenv("NVST_LOCAL_RANK", std::to_string(rank).c_str(), 0);
        ::setenv("NVST_LOCAL_WORLD_SIZE", std::to_string(nranks).c_str(), 0);
        py::gil_scoped_release nogil;
        nvst::init(options);
      },
      py::arg("unique_id"), py::arg("rank"), py::arg("nranks"), py::arg("backend") = "",
      "Joins the job of unique_id as `rank` of `nranks`. backend: 'nvst' (ours), 'nvshmem' (NVIDIA's "
      "NVSHMEM underneath; builds with nvshmem_backend_built() only) or '' (NVST_BACKEND, default nvst).");
  m.def(
      "init",
      [](const std::string& backend) {
        const nvst::InitOptions options = init_options(backend, "init");
        py::gil_scoped_release nogil;
        nvst::init(options);
      },
      py::arg("backend") = "",
      "Joins the job the environment describes (torchrun, mpirun, NVST_*); backend as "
      "for init_with_unique_id.");
  m.def("nvshmem_backend_built", &nvst::nvshmem_backend_built,
        "True when this build links NVSHMEM (the nvidia-nvshmem wheel was found at build time).");
  m.def("nvshmem_backend_version", &nvst::nvshmem_backend_version);
  m.attr("cuda_architectures") = NVST_CUDA_ARCHITECTURES;  // CMAKE_CUDA_ARCHITECTURES, comma-separated
  m.def(
      "check_backend", [](const std::string& backend, const std::string& fn) { check_backend(backend, fn.c_str()); },
      py::arg("backend"), py::arg("fn"), "Raises ValueError (naming fn) for a backend init would refuse.");
  m.def("finalize", [] {
    py::gil_scoped_release nogil;
    nvst::finalize();
  });
  m.def("initialized", &nvst::initialized);
  m.def("my_pe", &nvst::my_pe);
  m.def("n_pes", &nvst::n_pes);
  m.def("heap_free_bytes", &nvst::heap_free_bytes, "Symmetric heap bytes not allocated (in one hole or several).");
  m.def("heap_kind", [] { return std::string(nvst::heap_kind_name(nvst::heap_kind())); });
  m.def("transport_to", &nvst::transport_to, py::arg("pe"));
  m.def("barrier_all", [] {
    py::gil_scoped_release nogil;
    nvst::barrier_all();
  });
  m.def("quiet", [] {
    py::gil_scoped_release nogil;
    nvst::quiet();
  });
  m.def("fence", [] {
    py::gil_scoped_release nogil;
    nvst::fence();
  });

  py::class_<HeapLease>(m, "_HeapLease", "Holds a host heap's memory for numpy views of it.");
  py::class_<Symmetric>(m, "Symmetric", "A symmetric allocation: the same offset in every PE's heap.")
      .def_readonly("nbytes", &Symmetric::nbytes)
      .def(
          "array",
          [](Symmetric& s, py::object dtype) {
            require_host_heap("Symmetric.array");
            py::dtype dt = py::dtype::from_args(dtype);
            const std::string name = "nvshmem_tutorial.Symmetric.array: dtype " + std::string(py::str(dt));
            // Object references in raw heap bytes would be dereferenced as pointers.
            if (dt.attr("hasobject").cast<bool>()) throw py::type_error(name + " holds Python objects");
            if (dt.itemsize() <= 0) throw py::value_error(name + " has no size");
            if (s.ptr == nullptr) throw py::value_error("nvshmem_tutorial.Symmetric.array: the buffer was freed");
            if (s.nbytes % static_cast<std::size_t>(dt.itemsize()) != 0)
              throw py::value_error("nvshmem_tutorial.Symmetric.array: " + std::to_string(s.nbytes) +
                                    " bytes are not a whole number of " + std::string(py::str(dt)));
            // A view of this PE's copy. Its base holds the heap's memory, so
            // the view stays readable (stale) after free() or finalize().
            return py::array(dt, {static_cast<py::ssize_t>(s.nbytes / dt.itemsize())}, {dt.itemsize()}, s.ptr,
                             py::cast(HeapLease{nvst::heap_lease()}));
          },
          py::arg("dtype"),
          "A numpy view of this PE's copy (host-memory PEs). After free() or finalize() it still reads the last "
          "bytes (the memory stays until the view goes) but no longer takes part in the job.");

  m.def(
      "alloc",
      [](std::size_t nbytes) {
        Symmetric s;
        s.ptr = nvst::malloc(nbytes);
        s.nbytes = nbytes;
        if (s.ptr && nvst::device() < 0) std::memset(s.ptr, 0, nbytes);
        nvst::barrier_all();  // zeroed everywhere before anyone writes
        return s;
      },
      py::arg("nbytes"), "Collective: every PE asks for the same size.");
  m.def(
      "free",
      [](Symmetric& s) {
        nvst::free(s.ptr);
        s.ptr = nullptr;
        s.nbytes = 0;
      },
      py::arg("buffer"), "Collective.");

  m.def(
      "put",
      [](Symmetric& dest, py::array src, int pe, std::size_t offset) {
        require_host_heap("put");
        require_contiguous(src, "put", "src");
        check_range(dest, offset, static_cast<std::size_t>(src.nbytes()), "put");
        py::gil_scoped_release nogil;
        nvst::putmem(static_cast<char*>(dest.ptr) + offset, src.data(), static_cast<std::size_t>(src.nbytes()), pe);
      },
      py::arg("dest"), py::arg("src"), py::arg("pe"), py::arg("offset") = 0,
      "Blocking put of a numpy array into dest (+offset bytes) on PE pe.");
  m.def(
      "put_signal",
      [](Symmetric& dest, py::array src, Symmetric& sig, std::size_t sig_index, std::uint64_t value, int pe, bool add,
         std::size_t offset) {
        require_host_heap("put_signal");
        require_contiguous(src, "put_signal", "src");
        check_range(dest, offset, static_cast<std::size_t>(src.nbytes()), "put_signal");
        check_word(sig, sig_index, "put_signal");
        py::gil_scoped_release nogil;
        nvst::putmem_signal_nbi(static_cast<char*>(dest.ptr) + offset, src.data(),
                                static_cast<std::size_t>(src.nbytes()),
                                static_cast<std::uint64_t*>(sig.ptr) + sig_index, value,
                                add ? nvst::SignalOp::kAdd : nvst::SignalOp::kSet, pe);
        nvst::quiet();  // blocking: src may be reused on return
      },
      py::arg("dest"), py::arg("src"), py::arg("signal"), py::arg("signal_index"), py::arg("value"), py::arg("pe"),
      py::arg("add") = false, py::arg("offset") = 0, "Put, then set (or add to) a signal word; blocking.");
  m.def(
      "signal_wait_until",
      [](Symmetric& sig, std::size_t index, const std::string& cmp, std::uint64_t value) {
        require_host_heap("signal_wait_until");
        check_word(sig, index, "signal_wait_until");
        const nvst::Cmp c = cmp_of(cmp);
        py::gil_scoped_release nogil;
        return nvst::signal_wait_until(static_cast<std::uint64_t*>(sig.ptr) + index, c, value);
      },
      py::arg("signal"), py::arg("index"), py::arg("cmp"), py::arg("value"));

  // Remote atomics on one word of a symmetric buffer (index in words of
  // `dtype`): host heaps through the proxy, GPU heaps through a kernel.
  auto atomic = [](const char* fn, Symmetric& buf, std::size_t index, const std::string& dtype,
                   nvst::proxy::AtomicOp op, std::uint64_t operand, std::uint64_t compare, int pe) -> py::object {
    const bool wide = dtype == "int64" || dtype == "uint64";
    if (!wide && dtype != "int32" && dtype != "uint32")
      throw py::value_error(std::string("nvshmem_tutorial.") + fn + ": dtype '" + dtype +
                            "' is not one of int32, uint32, int64, uint64");
    const std::size_t width = wide ? 8 : 4;
    check_range(buf, index * width, width, fn);
    std::uint64_t old;
    {
      py::gil_scoped_release nogil;
      old = nvst::detail::atomic_word(op, static_cast<char*>(buf.ptr) + index * width, width, operand, compare, pe);
    }
    if (dtype == "int64") return py::int_(static_cast<std::int64_t>(old));
    if (dtype == "int32") return py::int_(static_cast<std::int32_t>(static_cast<std::uint32_t>(old)));
    return py::int_(wide ? old : static_cast<std::uint32_t>(old));
  };
  // Python ints of either sign become the word's bits (two's complement).
  auto bits = [](py::int_ v) { return PyLong_AsUnsignedLongLongMask(v.ptr()); };
  m.def(
      "atomic_fetch_add",
      [atomic, bits](Symmetric& buf, std::size_t index, py::int_ value, int pe, const std::string& dtype) {
        return atomic("atomic_fetch_add", buf, index, dtype, nvst::proxy::AtomicOp::kFetchAdd, bits(value), 0, pe);
      },
      py::arg("buffer"), py::arg("index"), py::arg("value"), py::arg("pe"), py::arg("dtype") = "int64",
      "Adds value to word `index` of buffer on PE pe; returns the word before.");
  m.def(
      "atomic_compare_swap",
      [atomic, bits](Symmetric& buf, std::size_t index, py::int_ cond, py::int_ value, int pe,
                     const std::string& dtype) {
        return atomic("atomic_compare_swap", buf, index, dtype, nvst::proxy::AtomicOp::kCompareSwap, bits(value),
                      bits(cond), pe);
      },
      py::arg("buffer"), py::arg("index"), py::arg("cond"), py::arg("value"), py::arg("pe"), py::arg("dtype") = "int64",
      "Stores value if the word equals cond; returns the word before either way.");
  m.def(
      "atomic_swap",
      [atomic, bits](Symmetric& buf, std::size_t index, py::int_ value, int pe, const std::string& dtype) {
        return atomic("atomic_swap", buf, index, dtype, nvst::proxy::AtomicOp::kSwap, bits(value), 0, pe);
      },
      py::arg("buffer"), py::arg("index"), py::arg("value"), py::arg("pe"), py::arg("dtype") = "int64");
  m.def(
      "atomic_fetch",
      [atomic](Symmetric& buf, std::size_t index, int pe, const std::string& dtype) {
        return atomic("atomic_fetch", buf, index, dtype, nvst::proxy::AtomicOp::kFetch, 0, 0, pe);
      },
      py::arg("buffer"), py::arg("index"), py::arg("pe"), py::arg("dtype") = "int64");

  m.def(
      "all_reduce",
      [](py::array in, py::array out, const std::string& op, int team) {
        const auto t = pair_dtype(in, out, "all_reduce");
        if (in.size() != out.size())
          throw py::value_error("nvshmem_tutorial.all_reduce: input has " + std::to_string(in.size()) +
                                " elements, output " + std::to_string(out.size()));
        const auto o = op_of(op);
        py::gil_scoped_release nogil;
        nvst::coll::all_reduce(in.data(), out.mutable_data(), static_cast<std::size_t>(in.size()), t, o, nullptr,
                               nvst::coll::Algo::kAuto, team_of(team));
      },
      py::arg("input"), py::arg("output"), py::arg("op") = "sum", py::arg("team") = 0);
  m.def(
      "all_gather",
      [](py::array in, py::array out, int team) {
        const auto t = pair_dtype(in, out, "all_gather");
        if (out.size() != in.size() * nvst::team_n_pes(team_of(team)))
          throw py::value_error("nvshmem_tutorial.all_gather: output needs team size x " + std::to_string(in.size()) +
                                " elements, has " + std::to_string(out.size()));
        py::gil_scoped_release nogil;
        nvst::coll::all_gather(in.data(), out.mutable_data(), static_cast<std::size_t>(in.size()), t, nullptr,
                               team_of(team));
      },
      py::arg("input"), py::arg("output"), py::arg("team") = 0);
  m.def(
      "reduce_scatter",
      [](py::array in, py::array out, const std::string& op, int team) {
        const auto t = pair_dtype(in, out, "reduce_scatter");
        if (in.size() != out.size() * nvst::team_n_pes(team_of(team)))
          throw py::value_error("nvshmem_tutorial.reduce_scatter: input needs team size x " +
                                std::to_string(out.size()) + " elements, has " + std::to_string(in.size()));
        const auto o = op_of(op);
        py::gil_scoped_release nogil;
        nvst::coll::reduce_scatter(in.data(), out.mutable_data(), static_cast<std::size_t>(out.size()), t, o, nullptr,
                                   team_of(team));
      },
      py::arg("input"), py::arg("output"), py::arg("op") = "sum", py::arg("team") = 0);
  m.def(
      "broadcast",
      [](py::array buf, int root, int team) {
        require_host_heap("broadcast");
        const auto t = dtype_of(buf, "broadcast", "buffer");
        py::gil_scoped_release nogil;
        nvst::coll::broadcast(buf.data(), buf.mutable_data(), static_cast<std::size_t>(buf.size()), t, root, nullptr,
                              team_of(team));
      },
      py::arg("buffer"), py::arg("root"), py::arg("team") = 0,
      "In place: every member's buffer becomes root's (root in the team's numbering).");

  // Teams (ints: TEAM_WORLD, TEAM_NODE, and what the splits return).
  m.attr("TEAM_WORLD") = static_cast<int>(nvst::Team::kWorld);
  m.attr("TEAM_NODE") = static_cast<int>(nvst::Team::kNode);
  m.def(
      "team_my_pe", [](int team) { return nvst::team_my_pe(team_of(team)); }, py::arg("team"),
      "This PE's index in the team; -1 if it is not a member.");
  m.def("team_n_pes", [](int team) { return nvst::team_n_pes(team_of(team)); }, py::arg("team"));
  m.def(
      "team_translate_pe", [](int team, int pe) { return nvst::team_translate_pe(team_of(team), pe); }, py::arg("team"),
      py::arg("team_pe"), "The world PE of the team's member team_pe.");
  m.def(
      "team_split_strided",
      [](int parent, int start, int stride, int size) {
        py::gil_scoped_release nogil;
        return static_cast<int>(nvst::team_split_strided(team_of(parent), start, stride, size));
      },
      py::arg("parent"), py::arg("start"), py::arg("stride"), py::arg("size"),
      "Collective over the world (every PE calls it with the same arguments); every PE gets the handle.");
  m.def(
      "team_split_2d",
      [](int parent, int xrange) {
        py::gil_scoped_release nogil;
        auto [x, y] = nvst::team_split_2d(team_of(parent), xrange);
        return std::make_pair(static_cast<int>(x), static_cast<int>(y));
      },
      py::arg("parent"), py::arg("xrange"), "(my row of xrange PEs, my column); collective over the world.");
  m.def(
      "coll_prepare",
      [](int team) {
        py::gil_scoped_release nogil;
        nvst::coll::prepare(team_of(team));
      },
      py::arg("team") = 0,
      "Makes the team's collective workspace: every PE calls it (members or not) before the team's first collective.");
}
