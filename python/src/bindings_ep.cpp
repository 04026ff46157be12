// nvst::ep::Buffer for Python, on device addresses (ints), torch-free. The
// DeepEP-shaped API with torch tensors, events and hooks is
// nvshmem_tutorial/ep.py; this file only moves arguments across.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bindings_common.hpp"
#include "nvst/ep.hpp"
#include "nvst/error.hpp"

namespace py = pybind11;
namespace ep = nvst::ep;

namespace nvst_py {

namespace {

// The shape fields every input struct has.
template <typename In>
void set_shape(In& in, int num_tokens, int hidden, int num_topk, int num_experts) {
  in.num_tokens = num_tokens;
  in.hidden = hidden;
  in.num_topk = num_topk;
  in.num_experts = num_experts;
}

ep::Config config_of(int num_sms, int threads) {
  ep::Config c;
  c.num_sms = num_sms;
  c.threads_per_block = threads;
  return c;
}

// phase: 0 both, 1 send, 2 receive (Buffer.low_latency_dispatch and _combine).
ep::Phase phase_at(int p) {
  if (p < 0 || p > 2) throw py::value_error("nvshmem_tutorial.ep: phase " + std::to_string(p) + " is not 0, 1 or 2");
  return static_cast<ep::Phase>(p);
}
static_assert(static_cast<int>(ep::Phase::kBoth) == 0 && static_cast<int>(ep::Phase::kSend) == 1 &&
              static_cast<int>(ep::Phase::kReceive) == 2);

// The combine's flags (Buffer.low_latency_combine): 1 use_logfmt, 2 fp16
// rows (else bf16), 4 fp16 output, 8 float32 output (neither: bf16).
ep::CombineType combine_out_of(int flags) {
  if ((flags & ~15) != 0 || (flags & 12) == 12)
    throw py::value_error("nvshmem_tutorial.ep: combine flags " + std::to_string(flags) +
                          " are not 1 use_logfmt | 2 fp16 rows | one of 4 fp16, 8 float32 output");
  if ((flags & 4) != 0) return ep::CombineType::kFP16;
  return (flags & 8) != 0 ? ep::CombineType::kFP32 : ep::CombineType::kBF16;
}

}  // namespace

void bind_ep(py::module_& m) {
  py::module_ e = m.def_submodule("ep", "nvst::ep on device addresses (nvshmem_tutorial.ep wraps it for torch).");

  py::class_<ep::DispatchHandle>(e, "DispatchHandle", "The routing of one normal dispatch (reused by later calls).")
      .def(py::init<>())
      .def_readonly("num_tokens", &ep::DispatchHandle::num_tokens)
      .def_readonly("num_topk", &ep::DispatchHandle::num_topk)
      .def_readonly("num_experts", &ep::DispatchHandle::num_experts)
      .def_readonly("num_recv_tokens", &ep::DispatchHandle::num_recv_tokens)
      .def_readonly("num_recv_tokens_per_expert", &ep::DispatchHandle::num_recv_tokens_per_expert)
      .def_readonly("n_pes", &ep::DispatchHandle::n_pes)
      .def_readonly("pes_per_node", &ep::DispatchHandle::pes_per_node)
      .def_readonly("count", &ep::DispatchHandle::count, "[src * n_pes + dst]: tokens src sends to dst")
      .def("valid", &ep::DispatchHandle::valid);

  e.def(
      "get_dispatch_layout",
      [](std::uintptr_t topk_idx, int num_tokens, int num_topk, int num_experts, std::uintptr_t per_rank,
         std::uintptr_t per_expert, std::uintptr_t in_rank, std::uintptr_t stream, std::uintptr_t per_node) {
        ep::LayoutOutput out;
        out.num_tokens_per_rank = as<int>(per_rank);
        out.num_tokens_per_node = as<int>(per_node);
        out.num_tokens_per_expert = as<int>(per_expert);
        out.is_token_in_rank = as<bool>(in_rank);
        py::gil_scoped_release nogil;
        ep::get_dispatch_layout(as<const std::int64_t>(topk_idx), num_tokens, num_topk, num_experts, out,
                                as_stream(stream));
      },
      py::arg("topk_idx"), py::arg("num_tokens"), py::arg("num_topk"), py::arg("num_experts"),
      py::arg("num_tokens_per_rank"), py::arg("num_tokens_per_expert"), py::arg("is_token_in_rank"), py::arg("stream"),
      py::arg("num_tokens_per_node") = 0);
  e.def(
      "nvl_size_hint",
      [](int num_recv_tokens, int hidden, int num_topk, bool fp8) {
        return ep::Buffer::nvl_size_hint(num_recv_tokens, hidden, num_topk, fp8 ? ep::XType::kFP8 : ep::XType::kBF16);
      },
      py::arg("num_recv_tokens"), py::arg("hidden"), py::arg("num_topk"), py::arg("fp8"));
  e.def("low_latency_size_hint", &ep::Buffer::low_latency_size_hint, py::arg("num_max_dispatch_tokens_per_rank"),
        py::arg("hidden"), py::arg("num_ranks"), py::arg("num_experts"), py::arg("num_topk"));

  py::class_<ep::Buffer>(e, "Buffer")
      .def(py::init([](std::size_t num_nvl_bytes, int max_tokens, int hidden, int num_experts, int num_topk) {
             py::gil_scoped_release nogil;  // collective: waits for every PE
             return std::make_unique<ep::Buffer>(num_nvl_bytes, max_tokens, hidden, num_experts, num_topk);
           }),
           py::arg("num_nvl_bytes"), py::arg("num_max_dispatch_tokens_per_rank") = 0, py::arg("ll_hidden") = 0,
           py::arg("ll_num_experts") = 0, py::arg("ll_num_topk") = 0)
      .def("local_nvl_region",
           [](const ep::Buffer& b) {
             const ep::Buffer::Region r = b.local_nvl_region();
             return py::make_tuple(addr(r.ptr), r.bytes);
           })
      .def("local_ll_region",
           [](const ep::Buffer& b) {
             const ep::Buffer::Region r = b.local_ll_region();
             return py::make_tuple(addr(r.ptr), r.bytes);
           })
      // The normal dispatch's outputs out of the receive region into the
      // caller's tensors: one call for all of them, where a DLPack tensor
      // and a copy_ each cost Python 15-20 us. Every source range
      // must lie in the region: nothing else is read.
      .def(
          "copy_out",
          [](const ep::Buffer& b, const std::vector<std::uintptr_t>& dst, const std::vector<std::uintptr_t>& src,
             const std::vector<std::size_t>& nbytes, std::uintptr_t stream) {
            NVST_REQUIRE(dst.size() == src.size() && src.size() == nbytes.size(),
                         "nvshmem_tutorial.ep.copy_out: ", dst.size(), " destinations, ", src.size(), " sources, ",
                         nbytes.size(), " sizes");
            const ep::Buffer::Region r = b.local_nvl_region();
            const std::uintptr_t lo = addr(r.ptr), hi = lo + r.bytes;
            for (std::size_t i = 0; i < src.size(); ++i)
              NVST_REQUIRE(nbytes[i] == 0 || (src[i] >= lo && src[i] <= hi && nbytes[i] <= hi - src[i]),
                           "nvshmem_tutorial.ep.copy_out: source ", i, " [", src[i], ", +", nbytes[i],
                           ") is outside the receive region [", lo, ", ", hi, ")");
            py::gil_scoped_release nogil;
            for (std::size_t i = 0; i < src.size(); ++i)
              if (nbytes[i] != 0)
                NVST_CHECK_CUDA(cudaMemcpyAsync(as<void>(dst[i]), as<const void>(src[i]), nbytes[i],
                                                cudaMemcpyDeviceToDevice, as_stream(stream)));
          },
          py::arg("dst"), py::arg("src"), py::arg("nbytes"), py::arg("stream"))
      .def_property_readonly("rank", &ep::Buffer::rank)
      .def_property_readonly("num_ranks", &ep::Buffer::num_ranks)
      // Returns (outputs as a dict of addresses, handle). The handle is filled
      // in place when it was not valid (the first dispatch of a routing).
      .def(
          "dispatch",
          [](ep::Buffer& b, std::uintptr_t x, std::uintptr_t x_scales, std::uintptr_t topk_idx,
             std::uintptr_t topk_weights, int num_tokens, int hidden, int num_topk, int num_experts, bool fp8,
             int expert_alignment, ep::DispatchHandle& handle, int num_sms, int threads, std::uintptr_t stream) {
            ep::DispatchInput in;
            in.x = as<const void>(x);
            in.x_scales = as<const float>(x_scales);
            in.topk_idx = as<const std::int64_t>(topk_idx);
            in.topk_weights = as<const float>(topk_weights);
            set_shape(in, num_tokens, hidden, num_topk, num_experts);
            in.x_type = fp8 ? ep::XType::kFP8 : ep::XType::kBF16;
            in.expert_alignment = expert_alignment;
            ep::DispatchOutput o;
            {
              py::gil_scoped_release nogil;
              o = b.dispatch(in, handle, config_of(num_sms, threads), as_stream(stream));
            }
            py::dict d;
            d["recv_x"] = addr(o.recv_x);
            d["recv_x_scales"] = addr(o.recv_x_scales);
            d["recv_topk_idx"] = addr(o.recv_topk_idx);
            d["recv_topk_weights"] = addr(o.recv_topk_weights);
            d["recv_src_idx"] = addr(o.recv_src_idx);
            d["num_recv_tokens"] = o.num_recv_tokens;
            return d;
          },
          py::arg("x"), py::arg("x_scales"), py::arg("topk_idx"), py::arg("topk_weights"), py::arg("num_tokens"),
          py::arg("hidden"), py::arg("num_topk"), py::arg("num_experts"), py::arg("fp8"), py::arg("expert_alignment"),
          py::arg("handle"), py::arg("num_sms"), py::arg("threads"), py::arg("stream"))
      .def(
          "combine",
          [](ep::Buffer& b, std::uintptr_t x, std::uintptr_t topk_weights, std::uintptr_t bias, int hidden,
             const ep::DispatchHandle& handle, std::uintptr_t combined_x, std::uintptr_t combined_topk_weights,
             int num_sms, int threads, std::uintptr_t stream, std::uintptr_t bias_2) {
            ep::CombineInput in;
            in.x = as<const void>(x);
            in.topk_weights = as<const float>(topk_weights);
            in.bias = as<const void>(bias);
            in.bias_2 = as<const void>(bias_2);
            in.hidden = hidden;
            ep::CombineOutput out;
            out.combined_x = as<void>(combined_x);
            out.combined_topk_weights = as<float>(combined_topk_weights);
            py::gil_scoped_release nogil;
            b.combine(in, handle, out, config_of(num_sms, threads), as_stream(stream));
          },
          py::arg("x"), py::arg("topk_weights"), py::arg("bias"), py::arg("hidden"), py::arg("handle"),
          py::arg("combined_x"), py::arg("combined_topk_weights"), py::arg("num_sms"), py::arg("threads"),
          py::arg("stream"), py::arg("bias_2") = 0)
      // The low-latency calls as ep.Buffer makes them on every step: ints
      // in, one int (or nothing) out, so that a call costs its launch and
      // little else. phase: 0 both, 1 send, 2 receive. The views of each
      // buffer set come from low_latency_views, once.
      .def(
          "low_latency_views",
          [](const ep::Buffer& b, int buffer_index, bool use_fp8) {
            const ep::LowLatencyDispatchOutput o = b.low_latency_views(buffer_index, use_fp8);
            return py::make_tuple(addr(o.recv_x), addr(o.recv_x_scales), addr(o.recv_count), addr(o.recv_src_info),
                                  o.max_rows_per_expert);
          },
          "(recv_x, recv_x_scales, recv_count, recv_src_info, max_rows_per_expert) of buffer set buffer_index",
          py::arg("buffer_index"), py::arg("use_fp8"))
      // flags: 1 use_fp8, 2 round_scale, 4 use_ue8m0. Returns the buffer set.
      .def(
          "low_latency_dispatch",
          [](ep::Buffer& b, std::uintptr_t x, std::uintptr_t topk_idx, int num_tokens, int hidden, int num_topk,
             int num_experts, int flags, std::uintptr_t stream, int phase, int buffer_index,
             std::uintptr_t wait_recv_cost_stats) {
            ep::LowLatencyDispatchInput in;
            in.x = as<const void>(x);
            in.topk_idx = as<const std::int64_t>(topk_idx);
            set_shape(in, num_tokens, hidden, num_topk, num_experts);
            in.use_fp8 = (flags & 1) != 0;
            in.round_scale = (flags & 2) != 0;
            in.use_ue8m0 = (flags & 4) != 0;
            in.wait_recv_cost_stats = as<std::int64_t>(wait_recv_cost_stats);
            const ep::Phase p = phase_at(phase);
            py::gil_scoped_release nogil;
            return b.low_latency_dispatch(in, as_stream(stream), p, buffer_index).buffer_index;
          },
          py::arg("x"), py::arg("topk_idx"), py::arg("num_tokens"), py::arg("hidden"), py::arg("num_topk"),
          py::arg("num_experts"), py::arg("flags"), py::arg("stream"), py::arg("phase"), py::arg("buffer_index"),
          py::arg("wait_recv_cost_stats"))
      // flags: 1 use_logfmt, 2 fp16 rows, 4 fp16 output, 8 float32 output.
      .def(
          "low_latency_combine",
          [](ep::Buffer& b, std::uintptr_t x, std::uintptr_t topk_idx, std::uintptr_t topk_weights, int num_tokens,
             int hidden, int num_topk, int num_experts, int buffer_index, std::uintptr_t combined_x,
             std::uintptr_t stream, int phase, std::uintptr_t wait_recv_cost_stats, int flags) {
            ep::LowLatencyCombineInput in;
            in.use_logfmt = (flags & 1) != 0;
            in.x_type = (flags & 2) != 0 ? ep::CombineType::kFP16 : ep::CombineType::kBF16;
            in.out_type = combine_out_of(flags);
            in.wait_recv_cost_stats = as<std::int64_t>(wait_recv_cost_stats);
            in.x = as<const void>(x);
            in.topk_idx = as<const std::int64_t>(topk_idx);
            in.topk_weights = as<const float>(topk_weights);
            set_shape(in, num_tokens, hidden, num_topk, num_experts);
            in.buffer_index = buffer_index;
            const ep::Phase p = phase_at(phase);
            py::gil_scoped_release nogil;
            b.low_latency_combine(in, as<void>(combined_x), as_stream(stream), p);
          },
          py::arg("x"), py::arg("topk_idx"), py::arg("topk_weights"), py::arg("num_tokens"), py::arg("hidden"),
          py::arg("num_topk"), py::arg("num_experts"), py::arg("buffer_index"), py::arg("combined_x"),
          py::arg("stream"), py::arg("phase"), py::arg("wait_recv_cost_stats"), py::arg("flags"));
}

}  // namespace nvst_py
