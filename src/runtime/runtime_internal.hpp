// For the project's own tools (benchmarks' baselines), not for users: the
// job's bootstrap, so a tool can open its own fabric endpoints next to ours.
#pragma once

#include <cstdint>

namespace nvst {
class Bootstrap;
namespace detail {
Bootstrap& runtime_bootstrap();
// Counts nvst::init calls in this process, so libraries on top can tell
// that state they keep belongs to an earlier (finalized) runtime.
std::uint64_t init_generation();
}  // namespace detail
}  // namespace nvst
