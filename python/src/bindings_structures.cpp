// The distributed structures' host handles (include/nvst/structures): the
// hash map and the ring buffer as classes that own their symmetric memory.
// The same algorithms run in kernels (DeviceOps); `view()` gives a kernel the
// addresses. Python wraps these in nvshmem_tutorial.structures.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

#include "bindings_common.hpp"
#include "nvst/nvst.hpp"
#include "nvst/structures/hash_map.hpp"
#include "nvst/structures/host_ops.hpp"
#include "nvst/structures/launch.hpp"
#include "nvst/structures/ring_buffer.hpp"

namespace py = pybind11;
namespace st = nvst::structures;

namespace nvst_py {

namespace {

std::uint64_t key_of(std::uint64_t key, const char* fn) {
  if (key > st::kMaxKey)
    throw py::value_error(std::string("nvshmem_tutorial.DistributedHashMap.") + fn + ": key " + std::to_string(key) +
                          " is above the largest key " + std::to_string(st::kMaxKey));
  return key;
}

class HashMap {
 public:
  explicit HashMap(std::uint64_t capacity) {
    if (capacity == 0) throw py::value_error("nvshmem_tutorial.DistributedHashMap: capacity must be positive");
    slots_ = static_cast<std::uint64_t*>(nvst::calloc(3 * capacity, 8));
    view_ = {slots_, capacity, nvst::n_pes()};
  }
  // Collective: every PE frees it.
  void free() {
    if (slots_ == nullptr) return;
    nvst::free(slots_);
    slots_ = nullptr;
  }
  bool insert(std::uint64_t key, std::uint64_t value) {
    live("insert");
    key_of(key, "insert");
    st::InsertResult r;
    {
      py::gil_scoped_release nogil;
      r = st::hash_map_insert<st::HostOps>(view_, key, value);
    }
    if (r == st::InsertResult::kFull)
      throw nvst::Error("nvshmem_tutorial.DistributedHashMap.insert: the map is full on PE " +
                        std::to_string(st::hash_owner(key, view_.n_pes)) + " (all " + std::to_string(view_.capacity) +
                        " slots hold other keys or erased ones; erased slots come back only with clear())");
    return r == st::InsertResult::kInserted;
  }
  std::optional<std::uint64_t> lookup(std::uint64_t key) {
    live("lookup");
    key_of(key, "lookup");
    std::uint64_t v = 0;
    bool found;
    {
      py::gil_scoped_release nogil;
      found = st::hash_map_lookup<st::HostOps>(view_, key, &v);
    }
    return found ? std::optional<std::uint64_t>(v) : std::nullopt;
  }
  bool erase(std::uint64_t key) {
    live("erase");
    key_of(key, "erase");
    py::gil_scoped_release nogil;
    return st::hash_map_erase<st::HostOps>(view_, key);
  }
  // Collective: empties every PE's slots (a barrier before and after).
  void clear() {
    live("clear");
    nvst::barrier_all();
    if (nvst::device() >= 0)
      throw py::value_error("nvshmem_tutorial.DistributedHashMap.clear: host heaps only (clear a GPU map in a kernel)");
    std::memset(slots_, 0, 24 * view_.capacity);
    nvst::barrier_all();
  }
  py::dict view() const {
    py::dict d;
    d["slots"] = addr(slots_);
    d["capacity"] = view_.capacity;
    d["n_pes"] = view_.n_pes;
    return d;
  }
  std::uint64_t capacity() const { return view_.capacity; }

 private:
  void live(const char* fn) const {
    if (slots_ == nullptr)
      throw py::value_error(std::string("nvshmem_tutorial.DistributedHashMap.") + fn + ": the map was freed");
  }
  std::uint64_t* slots_ = nullptr;
  st::HashMapView view_{};
};

class Ring {
 public:
  Ring(std::uint64_t capacity, std::uint64_t item_bytes) {
    if (capacity == 0 || item_bytes == 0)
      throw py::value_error("nvshmem_tutorial.RingBuffer: capacity and item size must be positive (got " +
                            std::to_string(capacity) + " items of " + std::to_string(item_bytes) + " bytes)");
    words_ = static_cast<std::uint64_t*>(nvst::calloc(2 + capacity, 8));
    data_ = static_cast<char*>(nvst::malloc(capacity * item_bytes));
    view_ = {words_, words_ + 1, words_ + 2, data_, capacity, item_bytes};
  }
  void free() {
    if (words_ == nullptr) return;
    nvst::free(data_);
    nvst::free(words_);
    words_ = nullptr;
  }
  std::uint64_t push(py::array item, int pe) {
    live("push");
    check_item(item, "push");
    host_heap("push");
    if (pe < 0 || pe >= nvst::n_pes())
      throw py::value_error("nvshmem_tutorial.RingBuffer.push: PE " + std::to_string(pe) + " is not in 0.." +
                            std::to_string(nvst::n_pes() - 1));
    py::gil_scoped_release nogil;
    return st::ring_push<st::HostOps>(view_, pe, item.data());
  }
  std::uint64_t pop(py::array out) {
    live("pop");
    check_item(out, "pop");
    host_heap("pop");
    py::gil_scoped_release nogil;
    return st::ring_pop<st::HostOps>(view_, out.mutable_data());
  }
  // GPU heaps: the item at device address `src` into `pe`'s ring, and the
  // next item of this PE's ring to `dst`, each a one-thread kernel on
  // `stream` (the Python side checks the tensors).
  void push_device(std::uintptr_t src, int pe, std::uintptr_t stream) {
    live("push");
    gpu_heap("push");
    if (pe < 0 || pe >= nvst::n_pes())
      throw py::value_error("nvshmem_tutorial.RingBuffer.push: PE " + std::to_string(pe) + " is not in 0.." +
                            std::to_string(nvst::n_pes() - 1));
    st::launch_ring_push(view_, pe, as<const void>(src), as_stream(stream));
  }
  void pop_device(std::uintptr_t dst, std::uintptr_t stream) {
    live("pop");
    gpu_heap("pop");
    st::launch_ring_pop(view_, as<void>(dst), as_stream(stream));
  }
  std::uint64_t size() const {
    live("size");
    host_heap("size");
    return st::ring_size<st::HostOps>(view_);
  }
  py::dict view() const {
    py::dict d;
    d["tail"] = addr(view_.tail);
    d["head"] = addr(view_.head);
    d["ready"] = addr(view_.ready);
    d["data"] = addr(view_.data);
    d["capacity"] = view_.capacity;
    d["item_bytes"] = view_.item_bytes;
    return d;
  }

 private:
  void live(const char* fn) const {
    if (words_ == nullptr)
      throw py::value_error(std::string("nvshmem_tutorial.RingBuffer.") + fn + ": the ring was freed");
  }
  void host_heap(const char* fn) const {
    if (nvst::device() >= 0)
      throw py::value_error(std::string("nvshmem_tutorial.RingBuffer.") + fn +
                            ": numpy items need a host heap; on a GPU heap pass CUDA tensors (push_device, pop_device) "
                            "or use the ring from kernels (nvst/structures/ring_buffer.hpp, addresses from view())");
  }
  void gpu_heap(const char* fn) const {
    if (nvst::device() < 0)
      throw py::value_error(std::string("nvshmem_tutorial.RingBuffer.") + fn + ": tensors on the GPU need a GPU heap");
  }
  void check_item(const py::array& a, const char* fn) const {
    if (!(a.flags() & py::array::c_style) || static_cast<std::uint64_t>(a.nbytes()) != view_.item_bytes)
      throw py::value_error(std::string("nvshmem_tutorial.RingBuffer.") + fn +
                            ": the item must be a C-contiguous "
                            "array of " +
                            std::to_string(view_.item_bytes) + " bytes (got " + std::to_string(a.nbytes()) + ")");
  }
  std::uint64_t* words_ = nullptr;
  char* data_ = nullptr;
  st::RingView view_{};
};

}  // namespace

void bind_structures(py::module_& m) {
  py::class_<HashMap>(m, "_HashMap", "Symmetric slots of a DistributedHashMap (collective constructor).")
      .def(py::init<std::uint64_t>(), py::arg("capacity"))
      .def("insert", &HashMap::insert, py::arg("key"), py::arg("value"))
      .def("lookup", &HashMap::lookup, py::arg("key"))
      .def("erase", &HashMap::erase, py::arg("key"))
      .def("clear", &HashMap::clear)
      .def("free", &HashMap::free)
      .def("view", &HashMap::view)
      .def_property_readonly("capacity", &HashMap::capacity);
  py::class_<Ring>(m, "_Ring", "Symmetric words and slots of a RingBuffer (collective constructor).")
      .def(py::init<std::uint64_t, std::uint64_t>(), py::arg("capacity"), py::arg("item_bytes"))
      .def("push", &Ring::push, py::arg("item"), py::arg("pe"))
      .def("pop", &Ring::pop, py::arg("out"))
      .def("size", &Ring::size)
      .def("push_device", &Ring::push_device, py::arg("src"), py::arg("pe"), py::arg("stream"))
      .def("pop_device", &Ring::pop_device, py::arg("dst"), py::arg("stream"))
      .def("free", &Ring::free)
      .def("view", &Ring::view);
}

}  // namespace nvst_py
