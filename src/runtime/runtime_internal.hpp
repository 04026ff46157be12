// For the project's own tools (benchmarks' baselines), not for users: the
// job's bootstrap, so a tool can open its own fabric endpoints next to ours.
#pragma once

namespace nvst {
class Bootstrap;
namespace detail {
Bootstrap& runtime_bootstrap();
}  // namespace detail
}  // namespace nvst
