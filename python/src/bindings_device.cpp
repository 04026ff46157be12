// The GPU half of nvshmem_tutorial._nvst, still torch-free: every function
// takes device addresses and CUDA streams as Python ints, so this module
// builds and imports without PyTorch. The Python files
// (nvshmem_tutorial/tensors.py, distributed.py, buffer.py, ep.py) check the
// torch tensors and pass data_ptr() and torch.cuda.current_stream().
// Tensors over library memory come from dlpack_bytes (a DLPack capsule that
// torch.utils.dlpack.from_dlpack turns into a uint8 tensor without a copy).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <string>
#include <vector>

#include "bindings_common.hpp"
#include "nvst/coll.hpp"
#include "nvst/nvst.hpp"
#include "tma_copy.hpp"

namespace py = pybind11;

namespace nvst_py {

namespace {

// DLPack's C ABI (dlpack.h, v0.8; stable), declared here so that the module
// needs no header from PyTorch or DLPack.
struct DLDevice {
  std::int32_t device_type;
  std::int32_t device_id;
};
struct DLDataType {
  std::uint8_t code;
  std::uint8_t bits;
  std::uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  std::int32_t ndim;
  DLDataType dtype;
  std::int64_t* shape;
  std::int64_t* strides;
  std::uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor*);
};
constexpr std::int32_t kDLCUDA = 2;
constexpr std::uint8_t kDLUInt = 1;

// What a capsule's tensor owns: its shape and a reference to the Python
// object that keeps the memory alive.
struct DlpackOwner {
  DLManagedTensor managed{};
  std::int64_t shape[1] = {0};
  PyObject* owner = nullptr;
};

void dlpack_delete(DLManagedTensor* t) {
  auto* o = static_cast<DlpackOwner*>(t->manager_ctx);
  {
    py::gil_scoped_acquire gil;  // torch may free the tensor from any thread
    Py_XDECREF(o->owner);
  }
  delete o;
}

// A PyCapsule "dltensor": `nbytes` bytes at device address `addr` on this
// PE's GPU, as a 1-D uint8 tensor that keeps `owner` alive. The address may
// be a peer's memory mapped here (nvst::ptr): the device is this PE's GPU,
// which is the one that reaches it.
py::capsule dlpack_bytes(std::uintptr_t addr, std::int64_t nbytes, py::object owner) {
  if (nbytes < 0) throw py::value_error("nvshmem_tutorial: negative byte count " + std::to_string(nbytes));
  if (nvst::device() < 0) throw py::value_error("nvshmem_tutorial: tensors need a GPU heap (this PE has none)");
  auto* o = new DlpackOwner;
  o->shape[0] = nbytes;
  o->owner = owner.inc_ref().ptr();
  DLTensor& t = o->managed.dl_tensor;
  t.data = reinterpret_cast<void*>(addr);
  t.device = {kDLCUDA, nvst::device()};
  t.ndim = 1;
  t.dtype = {kDLUInt, 8, 1};
  t.shape = o->shape;
  t.strides = nullptr;  // compact
  t.byte_offset = 0;
  o->managed.manager_ctx = o;
  o->managed.deleter = dlpack_delete;
  // A consumer renames the capsule "used_dltensor" and calls the deleter; an
  // unused capsule frees it here.
  return py::capsule(&o->managed, "dltensor", [](PyObject* cap) {
    if (PyCapsule_IsValid(cap, "dltensor")) {
      auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
      m->deleter(m);
    }
  });
}

// A collective's dtype and reduction cross from Python as the codes in
// coll.DTYPES and coll.OPS (ints: a call converts no strings).
nvst::coll::DType dtype_of(int code) {
  if (code < 0 || code >= kDTypes)
    throw py::value_error("nvshmem_tutorial: dtype code " + std::to_string(code) + " is not one of coll.DTYPES' (" +
                          names_of(kDTypes, dtype_name) + ")");
  return static_cast<nvst::coll::DType>(code);
}
nvst::coll::RedOp redop_of(int code) {
  if (code < 0 || code >= kRedOps)
    throw py::value_error("nvshmem_tutorial: reduction code " + std::to_string(code) + " is not one of coll.OPS' (" +
                          names_of(kRedOps, redop_name) + ")");
  return static_cast<nvst::coll::RedOp>(code);
}

}  // namespace

void bind_device(py::module_& m) {
  m.def("device", &nvst::device, "This PE's GPU (-1 for a host heap).");
  m.def("dlpack_bytes", &dlpack_bytes, py::arg("addr"), py::arg("nbytes"), py::arg("owner"),
        "A DLPack capsule: nbytes of this GPU's memory at addr as a uint8 tensor that keeps owner alive.");
  m.def(
      "bootstrap_allgather",
      [](const py::bytes& mine) {
        const std::string b = mine;
        std::vector<std::byte> all;
        {
          py::gil_scoped_release nogil;
          all = nvst::bootstrap_allgather(b.data(), b.size());
        }
        py::list out;
        for (std::size_t i = 0; i < all.size(); i += b.size())
          out.append(py::bytes(reinterpret_cast<const char*>(all.data()) + i, b.size()));
        return out;
      },
      py::arg("mine"),
      "Every PE's bytes (the same length on every PE, else an error on all) in PE order, over the bootstrap.");
  m.def(
      "malloc",
      [](std::size_t nbytes) {
        py::gil_scoped_release nogil;
        return addr(nvst::calloc(1, nbytes));
      },
      py::arg("nbytes"), "Collective: a zeroed symmetric allocation; returns its address (0 for 0 bytes).");
  m.def(
      "align",
      [](std::size_t alignment, std::size_t nbytes) {
        py::gil_scoped_release nogil;
        return addr(nvst::align(alignment, nbytes));
      },
      py::arg("alignment"), py::arg("nbytes"),
      "Collective: a symmetric allocation at a multiple of alignment (a power of two), not zeroed; its address.");
  m.def(
      "tma_copy",
      [](std::uintptr_t dst, std::uintptr_t src, std::size_t nbytes, std::uintptr_t stream) {
        py::gil_scoped_release nogil;
        tma_copy(as<>(dst), as<const void>(src), nbytes, as_stream(stream));
      },
      py::arg("dst"), py::arg("src"), py::arg("nbytes"), py::arg("stream"),
      "dst <- src (this GPU's memory) through the bulk copy engine (cp.async.bulk), ordered on stream.");
  m.def(
      "free_addr",
      [](std::uintptr_t addr) {
        py::gil_scoped_release nogil;
        nvst::free(as<>(addr));
      },
      py::arg("addr"), "Collective: frees what malloc returned.");
  m.def(
      "peer_addr", [](std::uintptr_t a, int pe) { return addr(nvst::ptr(as<>(a), pe)); }, py::arg("addr"),
      py::arg("pe"), "nvshmem_ptr: where this PE reaches pe's copy of addr (0: not by load/store).");
  m.def(
      "is_symmetric", [](std::uintptr_t addr, std::size_t nbytes) { return nvst::is_symmetric(as<>(addr), nbytes); },
      py::arg("addr"), py::arg("nbytes") = 1);
  m.def(
      "barrier_all_on_stream",
      [](std::uintptr_t stream) {
        py::gil_scoped_release nogil;
        nvst::barrier_all_on_stream(as_stream(stream));
      },
      py::arg("stream"));
  m.def(
      "putmem_on_stream",
      [](std::uintptr_t dest, std::uintptr_t src, std::size_t nbytes, int pe, std::uintptr_t stream) {
        py::gil_scoped_release nogil;
        nvst::putmem_on_stream(as<>(dest), as<>(src), nbytes, pe, as_stream(stream));
      },
      py::arg("dest"), py::arg("src"), py::arg("nbytes"), py::arg("pe"), py::arg("stream"));
  m.def(
      "getmem_on_stream",
      [](std::uintptr_t dest, std::uintptr_t src, std::size_t nbytes, int pe, std::uintptr_t stream) {
        py::gil_scoped_release nogil;
        nvst::getmem_on_stream(as<>(dest), as<>(src), nbytes, pe, as_stream(stream));
      },
      py::arg("dest"), py::arg("src"), py::arg("nbytes"), py::arg("pe"), py::arg("stream"));
  m.def(
      "putmem_signal_on_stream",
      [](std::uintptr_t dest, std::uintptr_t src, std::size_t nbytes, std::uintptr_t sig, std::uint64_t value, bool add,
         int pe, std::uintptr_t stream) {
        py::gil_scoped_release nogil;
        nvst::putmem_signal_on_stream(as<>(dest), as<>(src), nbytes, as<std::uint64_t>(sig), value,
                                      add ? nvst::SignalOp::kAdd : nvst::SignalOp::kSet, pe, as_stream(stream));
      },
      py::arg("dest"), py::arg("src"), py::arg("nbytes"), py::arg("signal"), py::arg("value"), py::arg("add"),
      py::arg("pe"), py::arg("stream"));
  m.def(
      "signal_op_on_stream",
      [](std::uintptr_t sig, std::uint64_t value, bool add, int pe, std::uintptr_t stream) {
        py::gil_scoped_release nogil;
        nvst::signal_op_on_stream(as<std::uint64_t>(sig), value, add ? nvst::SignalOp::kAdd : nvst::SignalOp::kSet, pe,
                                  as_stream(stream));
      },
      py::arg("signal"), py::arg("value"), py::arg("add"), py::arg("pe"), py::arg("stream"));
  m.def(
      "signal_wait_until_on_stream",
      [](std::uintptr_t sig, const std::string& cmp, std::uint64_t value, std::uintptr_t stream) {
        const nvst::Cmp c = cmp_of(cmp);
        py::gil_scoped_release nogil;
        nvst::signal_wait_until_on_stream(as<std::uint64_t>(sig), c, value, as_stream(stream));
      },
      py::arg("signal"), py::arg("cmp"), py::arg("value"), py::arg("stream"));

  // Collectives on device addresses (any device memory; stream-ordered).
  py::module_ c = m.def_submodule("coll", "Collectives on device addresses (the torch layer calls these).");
  py::dict dtypes, ops;
  for (int i = 0; i < kDTypes; ++i) dtypes[dtype_name(i)] = i;
  for (int i = 0; i < kRedOps; ++i) ops[redop_name(i)] = i;
  c.attr("DTYPES") = dtypes;  // name -> the code the calls below take
  c.attr("OPS") = ops;
  c.def(
      "all_reduce",
      [](std::uintptr_t in, std::uintptr_t out, std::size_t count, int dtype, int op, std::uintptr_t stream, int team) {
        const auto t = dtype_of(dtype);
        const auto o = redop_of(op);
        py::gil_scoped_release nogil;
        nvst::coll::all_reduce(as<>(in), as<>(out), count, t, o, as_stream(stream), nvst::coll::Algo::kAuto,
                               team_of(team));
      },
      py::arg("input"), py::arg("output"), py::arg("count"), py::arg("dtype"), py::arg("op"), py::arg("stream"),
      py::arg("team") = 0);
  c.def(
      "all_gather",
      [](std::uintptr_t in, std::uintptr_t out, std::size_t count, int dtype, std::uintptr_t stream, int team) {
        const auto t = dtype_of(dtype);
        py::gil_scoped_release nogil;
        nvst::coll::all_gather(as<>(in), as<>(out), count, t, as_stream(stream), team_of(team));
      },
      py::arg("input"), py::arg("output"), py::arg("count"), py::arg("dtype"), py::arg("stream"), py::arg("team") = 0);
  c.def(
      "reduce_scatter",
      [](std::uintptr_t in, std::uintptr_t out, std::size_t count, int dtype, int op, std::uintptr_t stream, int team) {
        const auto t = dtype_of(dtype);
        const auto o = redop_of(op);
        py::gil_scoped_release nogil;
        nvst::coll::reduce_scatter(as<>(in), as<>(out), count, t, o, as_stream(stream), team_of(team));
      },
      py::arg("input"), py::arg("output"), py::arg("count"), py::arg("dtype"), py::arg("op"), py::arg("stream"),
      py::arg("team") = 0);
  c.def(
      "broadcast",
      [](std::uintptr_t in, std::uintptr_t out, std::size_t count, int dtype, int root, std::uintptr_t stream,
         int team) {
        const auto t = dtype_of(dtype);
        py::gil_scoped_release nogil;
        nvst::coll::broadcast(as<>(in), as<>(out), count, t, root, as_stream(stream), team_of(team));
      },
      py::arg("input"), py::arg("output"), py::arg("count"), py::arg("dtype"), py::arg("root"), py::arg("stream"),
      py::arg("team") = 0);
  c.def(
      "barrier",
      [](std::uintptr_t stream, int team) {
        py::gil_scoped_release nogil;
        nvst::coll::barrier(as_stream(stream), team_of(team));
      },
      py::arg("stream"), py::arg("team") = 0);
  c.def(
      "all_to_all",
      [](std::uintptr_t in, std::uintptr_t out, std::size_t count, int dtype, std::uintptr_t stream, int team) {
        const auto t = dtype_of(dtype);
        py::gil_scoped_release nogil;
        nvst::coll::all_to_all(as<>(in), as<>(out), count, t, as_stream(stream), team_of(team));
      },
      py::arg("input"), py::arg("output"), py::arg("count_per_pe"), py::arg("dtype"), py::arg("stream"),
      py::arg("team") = 0);
  c.def(
      "all_to_allv",
      [](std::uintptr_t in, std::vector<std::size_t> send_counts, std::vector<std::size_t> send_displs,
         std::uintptr_t out, std::vector<std::size_t> recv_counts, std::vector<std::size_t> recv_displs, int dtype,
         std::uintptr_t stream, int team) {
        const auto t = dtype_of(dtype);
        py::gil_scoped_release nogil;
        nvst::coll::all_to_allv(as<>(in), send_counts, send_displs, as<>(out), recv_counts, recv_displs, t,
                                as_stream(stream), team_of(team));
      },
      py::arg("input"), py::arg("send_counts"), py::arg("send_displs"), py::arg("output"), py::arg("recv_counts"),
      py::arg("recv_displs"), py::arg("dtype"), py::arg("stream"), py::arg("team") = 0);
}

}  // namespace nvst_py
