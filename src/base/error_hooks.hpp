// How the runtime teaches the error macros its rank and how to describe a
// device-side failure (the pinned mailbox a trapped kernel wrote).
#pragma once

#include <functional>
#include <string>

namespace nvst::detail {
void set_error_rank(int rank);
void set_device_error_describer(std::function<std::string()> f);
}  // namespace nvst::detail
