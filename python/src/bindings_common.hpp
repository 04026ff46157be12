// Helpers shared by the binding files of nvshmem_tutorial._nvst: names
// from Python mapped to the library's enums (a bad name raises ValueError
// that lists the good ones), and the per-file bind_* entry points.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include <cuda_runtime_api.h>

#include "nvst/coll.hpp"
#include "nvst/nvst.hpp"

namespace nvst_py {

// Device addresses and CUDA streams cross from Python as ints.
template <typename T = void>
T* as(std::uintptr_t p) {
  return reinterpret_cast<T*>(p);
}
inline cudaStream_t as_stream(std::uintptr_t s) { return reinterpret_cast<cudaStream_t>(s); }
inline std::uintptr_t addr(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }
// Teams cross as ints (the handle); the library checks that it exists.
inline nvst::Team team_of(int t) { return static_cast<nvst::Team>(t); }

// The collectives' reductions and dtypes as the library names them
// (nvst::coll::redop_name, dtype_name), in the order of their codes: the
// one list that the name and code lookups below and coll.OPS / coll.DTYPES
// are made from.
constexpr int kRedOps = static_cast<int>(nvst::coll::RedOp::kProd) + 1;
constexpr int kDTypes = static_cast<int>(nvst::coll::DType::kI64) + 1;
inline const char* redop_name(int code) { return nvst::coll::redop_name(static_cast<nvst::coll::RedOp>(code)); }
inline const char* dtype_name(int code) { return nvst::coll::dtype_name(static_cast<nvst::coll::DType>(code)); }
// "a, b, c": every name, for the errors.
template <typename Name>
std::string names_of(int count, Name name) {
  std::string all;
  for (int i = 0; i < count; ++i) all += (i ? ", " : "") + std::string(name(i));
  return all;
}

// A reduction by the library's name of it.
inline nvst::coll::RedOp op_of(const std::string& op) {
  for (int i = 0; i < kRedOps; ++i)
    if (op == redop_name(i)) return static_cast<nvst::coll::RedOp>(i);
  throw pybind11::value_error("nvshmem_tutorial: op '" + op + "' is not one of " + names_of(kRedOps, redop_name));
}

inline nvst::Cmp cmp_of(const std::string& c) {
  if (c == "eq") return nvst::Cmp::kEq;
  if (c == "ne") return nvst::Cmp::kNe;
  if (c == "gt") return nvst::Cmp::kGt;
  if (c == "ge") return nvst::Cmp::kGe;
  if (c == "lt") return nvst::Cmp::kLt;
  if (c == "le") return nvst::Cmp::kLe;
  throw pybind11::value_error("nvshmem_tutorial: comparison '" + c + "' is not one of eq, ne, gt, ge, lt, le");
}

// Each adds its functions to the module (bindings_device.cpp, bindings_ep.cpp,
// bindings_structures.cpp).
void bind_device(pybind11::module_& m);
void bind_ep(pybind11::module_& m);
void bind_structures(pybind11::module_& m);

}  // namespace nvst_py
