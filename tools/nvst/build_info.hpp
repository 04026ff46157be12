// The commit this build came from (cmake/GitCommit.cmake), for `nvst info`
// and the benchmarks' JSON. One generated source holds it, so a new commit
// recompiles that file only.
#pragma once

namespace nvst::tools {
extern const char* const kGitCommit;
}  // namespace nvst::tools
