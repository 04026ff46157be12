// A collective call's bits (coll_internal.hpp: CallSig) and the error of
// members that made different calls, on host-memory PEs (host_coll.cpp) and
// on GPUs (kernels.cuh reports through the device mailbox; its words are
// made here).
#include <iterator>
#include <string>

#include "coll/coll_internal.hpp"
#include "device/device_runtime.hpp"

namespace nvst::coll::internal {

namespace {
const char* const kKinds[] = {"?",      "all_reduce", "all_gather", "all_to_all", "barrier", "reduce_scatter",
                              "reduce", "broadcast",  "all_to_allv"};
const char* const kAlgos[] = {"push", "twoshot", "ring", "ll"};

unsigned kind_of(std::uint32_t bits) { return bits >> 20; }
unsigned algo_of(std::uint32_t bits) { return (bits >> 13) & 3; }
const char* kind_name(std::uint32_t bits) { return kind_of(bits) < std::size(kKinds) ? kKinds[kind_of(bits)] : "?"; }

// "all_reduce (dtype float32, op sum)", with the algorithm when asked.
std::string describe(std::uint32_t bits, bool with_algo) {
  const unsigned dtype = (bits >> 17) & 7, op = (bits >> 15) & 3;
  return detail::concat(kind_name(bits), " (dtype ", dtype < 5 ? dtype_name(static_cast<DType>(dtype)) : "?", ", op ",
                        redop_name(static_cast<RedOp>(op)),
                        with_algo ? detail::concat(", ", kAlgos[algo_of(bits)]) : "", ")");
}

// The device's kCallMismatch: the kernel wrote both calls' bits and this
// PE's count, root and team into the mailbox.
std::string describe_device_mismatch(const dev::DeviceError& e) {
  const auto mine = static_cast<std::uint32_t>(e.expected);
  return call_mismatch_text(kind_name(mine), e.peer_pe, static_cast<std::uint32_t>(e.observed), e.my_pe, mine, e.offset,
                            e.arg, e.cmp);
}
const bool g_registered = [] {
  detail::set_call_mismatch_describer(&describe_device_mismatch);
  return true;
}();
}  // namespace

std::uint32_t CallSig::bits() const {
  std::uint64_t h = (count + 1) * 0x9e3779b97f4a7c15ull ^ (static_cast<std::uint64_t>(root + 1) << 32);
  h ^= h >> 29;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 32;
  return (static_cast<std::uint32_t>(kind) << 20) | (static_cast<std::uint32_t>(dtype) << 17) |
         (static_cast<std::uint32_t>(op) << 15) | (static_cast<std::uint32_t>(algo & 3) << 13) |
         static_cast<std::uint32_t>(h & 0x1fff);
}

std::string call_mismatch_text(const char* fn, int peer, std::uint32_t theirs, int me, std::uint32_t mine,
                               std::size_t count, int root, int team) {
  (void)g_registered;
  const bool same_call = (theirs >> 15) == (mine >> 15);  // kind, dtype and op
  const bool same_algo = algo_of(theirs) == algo_of(mine);
  const char* why = !same_call   ? ""
                    : !same_algo ? ": they chose different algorithms (NVST_COLL_ALGO, or counts on either side of a "
                                   "size limit)"
                                 : ": they differ in count, root or team";
  return detail::concat("nvst::coll::", fn, ": PE ", peer, " called ", describe(theirs, !same_algo), " while PE ", me,
                        " called ", describe(mine, !same_algo), " with count ", count,
                        root >= 0 ? detail::concat(", root ", root) : std::string(), ", team ", team, why,
                        "; every member must make the same call");
}

}  // namespace nvst::coll::internal
