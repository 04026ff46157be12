// Benchmark results: rows, an nccl-tests-style table and the JSON format
// every benchmark writes (machine, gpus, date, commit, versions, rows).
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

namespace nvst::tools {

struct ResultRow {
  std::string op;    // "put", "put_bidir", "pingpong", ...
  std::string impl;  // "nvst_put", "nccl", "nvshmem", ...
  std::size_t bytes = 0;
  double time_us = 0;
  double algbw_gbps = 0;
  double busbw_gbps = 0;
  long long wrong = 0;
  // How many times faster this row is than a baseline's row of the same op
  // and size, by baseline (Report::add_speedups). JSON "speedup_vs", if set.
  std::map<std::string, double> speedup_vs{};
};

struct Report {
  std::vector<ResultRow> rows;
  std::string label;
  std::string nvshmem_version;     // empty: not measured
  std::vector<std::string> notes;  // printed under the tables, JSON "notes" (if any)
  void add(const ResultRow& r) { rows.push_back(r); }
  // Sets speedup_vs[baseline] in ours' rows where the baseline has a row of
  // the same op and size.
  void add_speedups(const std::string& ours, const std::string& baseline);
  // One table per op: a row per size, a column per impl (GB/s, or us for
  // latency ops), then ours over the best baseline and #wrong. Each impl in
  // `detailed` that has rows leaves those columns and gets four of its own
  // at the right: its time, busbw, ours over it, and its #wrong.
  void print_table(const std::string& ours, const std::vector<std::string>& baselines,
                   const std::vector<std::string>& detailed = {}) const;
  void write_json(const std::string& path) const;
};

// Progress of a long run on stderr: rewritten in place on a terminal; in a
// log (not a terminal) one line at most every 10 s, so logs stay readable.
void progress(const std::string& what);
// Clears the progress line (terminal only).
void progress_done();

// Median of samples.
double median(std::vector<double> v);

}  // namespace nvst::tools
