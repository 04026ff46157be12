// Settings read from the environment: one place, with their defaults, so the
// README's table and the code agree.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace nvst::settings {

std::optional<std::string> get(const char* name);
// Every parser throws naming the variable and its value on junk, a sign
// where none belongs, overflow, or (get_double) inf and nan.
// Size ("1G", "256M", "4096", "1T"), at most kMaxSize.
constexpr std::size_t kMaxSize = std::size_t{1} << 50;
std::optional<std::size_t> get_size(const char* name);
std::optional<long> get_int(const char* name);
// An integer in [lo, hi] (hi <= INT_MAX).
std::optional<int> get_int_in(const char* name, long lo, long hi);
std::optional<double> get_double(const char* name);
// Longest timeout a setting may ask for (about 11.5 days).
constexpr double kMaxSeconds = 1e6;

double host_timeout_s();                 // NVST_TIMEOUT_S (120)
double device_timeout_s();               // NVST_DEVICE_TIMEOUT_S (60)
std::size_t heap_bytes(bool host_heap);  // NVST_SYMMETRIC_SIZE (1G; 256M host)
std::optional<int> node_size();          // NVST_NODE_SIZE: logical nodes of k PEs
// NVST_COLL_WORKSPACE (32M): bytes of each buffer of a team's collective
// workspace (coll.cu keeps 2 on host heaps, 4 on GPUs, per team).
std::size_t coll_workspace_bytes();

}  // namespace nvst::settings
