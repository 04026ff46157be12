// nvst: the command-line tool. `nvst info`, `nvst bench [p2p|host]`,
// `nvst selftest`. Without a launcher it spawns one process per PE itself
// (re-running this binary with NVST_* set); under torchrun or mpirun each
// process is already a PE.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "bench.hpp"
#include "commands.hpp"
#include "nvst/error.hpp"
#include "nvst/launch.hpp"
#include "nvst/settings.hpp"

namespace {

using nvst::tools::BenchOptions;

std::vector<std::string> g_argv;

// Runs `pe_main` in every PE: here when already a PE, else in `np` spawned
// copies of this command.
int run_as_job(int np, const std::vector<std::pair<std::string, std::string>>& env, int (*pe_main)(const BenchOptions&),
               const BenchOptions& opts) {
  if (nvst::is_pe_process()) return pe_main(opts);
  nvst::SpawnOptions spawn;
  spawn.nprocs = np;
  spawn.argv = g_argv;
  spawn.env = env;
  return nvst::spawn_and_wait(spawn);
}

int selftest_main(const BenchOptions&) { return nvst::tools::selftest_pe(); }

// This command line with the benchmark named explicitly, for the PEs.
std::vector<std::string> bench_argv(std::vector<std::string> args, const std::string& which) {
  for (std::size_t i = 1; i < args.size(); ++i) {
    if (args[i] != "bench") continue;
    if (i + 1 < args.size() && (args[i + 1] == "p2p" || args[i + 1] == "host" || args[i + 1] == "fifo" ||
                                args[i + 1] == "coll" || args[i + 1] == "ep" || args[i + 1] == "all"))
      args[i + 1] = which;
    else
      args.insert(args.begin() + static_cast<long>(i) + 1, which);
    break;
  }
  return args;
}

// The command line for the PEs of one benchmark. They parse it again, so
// what the parent changed for that benchmark of `nvst bench all` (its own
// JSON file, a smaller largest size) must be written into it: without this
// every benchmark's PEs wrote the one --json file given, each over the last.
std::vector<std::string> pe_argv(std::vector<std::string> args, const std::string& which, const BenchOptions& o) {
  args = bench_argv(std::move(args), which);
  auto drop = [&args](const std::string& name) {  // "--json X", "--json=X", "-e X", "-eX"
    for (std::size_t i = 1; i < args.size();) {
      const std::string& a = args[i];
      const bool attached = name.size() == 2 ? a.size() > 2 && a.rfind(name, 0) == 0 : a.rfind(name + "=", 0) == 0;
      const auto at = args.begin() + static_cast<long>(i);
      if (a == name && i + 1 < args.size())
        args.erase(at, at + 2);
      else if (attached)
        args.erase(at);
      else
        ++i;
    }
  };
  for (const char* name : {"--json", "-e", "--maxbytes"}) drop(name);
  if (!o.json_path.empty()) args.insert(args.end(), {"--json", o.json_path});
  args.insert(args.end(), {"-e", std::to_string(o.max_bytes)});
  return args;
}

std::size_t parse_size(const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  NVST_REQUIRE(end != s.c_str() && v >= 0, "not a size: '", s, "' (examples: 4K, 16M, 1G)");
  std::string unit(end);
  double mul = 1;
  if (unit == "K" || unit == "k" || unit == "KB")
    mul = 1024.0;
  else if (unit == "M" || unit == "m" || unit == "MB")
    mul = 1024.0 * 1024;
  else if (unit == "G" || unit == "g" || unit == "GB")
    mul = 1024.0 * 1024 * 1024;
  else
    NVST_REQUIRE(unit.empty() || unit == "B", "not a size: '", s, "' (examples: 4K, 16M, 1G)");
  return static_cast<std::size_t>(v * mul);
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 0; i < argc; ++i) g_argv.emplace_back(argv[i]);
  CLI::App app{"nvst: NVSHMEM-Tutorial's runtime tool (info, benchmarks, self-test)"};
  app.require_subcommand(1);

  app.add_subcommand("info", "GPUs, NVLink/peer-access matrix, transports and versions");

  BenchOptions opts;
  std::string min_s = "4K", max_s = "1G";
  int np = 0;
  auto* bench =
      app.add_subcommand("bench", "benchmarks on whatever hardware is present (p2p with 2+ GPUs, host otherwise)");
  bench->add_option("which", "p2p, coll, ep, fifo, host, or all (default: all that the hardware allows)")
      ->check(CLI::IsMember({"p2p", "coll", "ep", "fifo", "host", "all"}));
  bench->add_option("-G,--cudagraph", opts.graph_iters, "operations per CUDA graph (nccl-tests -G; bench coll)")
      ->check(CLI::PositiveNumber);
  bench->add_option("-b,--minbytes", min_s, "smallest size (nccl-tests -b)");
  bench->add_option("-e,--maxbytes", max_s, "largest size (nccl-tests -e)");
  bench->add_option("-f,--stepfactor", opts.factor, "size multiplier (nccl-tests -f)")->check(CLI::Range(1.01, 1024.0));
  bench->add_option("-n,--iters", opts.iters, "timed iterations per sample (nccl-tests -n)")
      ->check(CLI::Range(1, 1000000));
  bench->add_option("-w,--warmup_iters", opts.warmup, "warm-up iterations (nccl-tests -w)")
      ->check(CLI::Range(0, 1000000));
  bench->add_option("-d,--datatype", opts.datatype, "element type (nccl-tests -d; bench coll)")
      ->check(CLI::IsMember({"bfloat16", "half", "float", "int32", "int64"}));
  bench->add_option("-o,--op", opts.redop, "reduction (nccl-tests -o; bench coll's all_reduce and reduce_scatter)")
      ->check(CLI::IsMember({"sum", "prod", "max", "min"}));
  bench->add_option("--samples", opts.samples, "timed samples; the median is reported")->check(CLI::Range(1, 1000));
  bench->add_option("-c,--check", opts.check, "verify data and count wrong words (0/1)");
  bench->add_option("--json", opts.json_path, "write results as JSON (rank 0)");
  bench->add_option("--label", opts.label, "free text stored in the JSON");
  bench->add_option("--np", np, "PEs to spawn (default: 2 GPUs for p2p; host: one per core, 2 to 4)")
      ->check(CLI::Range(1, 1024));

  int self_np = 0;
  auto* self = app.add_subcommand("selftest", "quick end-to-end check of the runtime");
  self->add_option("--np", self_np, "PEs to spawn (default: every GPU, or 2 host PEs)")->check(CLI::Range(1, 1024));

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  try {
    if (app.got_subcommand("info")) return nvst::tools::info();

    if (app.got_subcommand("selftest")) {
      const int gpus = nvst::tools::gpu_count();
      int n = self_np ? self_np : (gpus > 0 ? gpus : 2);
      std::vector<std::pair<std::string, std::string>> env;
      if (gpus == 0) env.emplace_back("NVST_HEAP", "host");
      return run_as_job(n, env, selftest_main, opts);
    }

    // bench
    opts.min_bytes = parse_size(min_s);
    opts.max_bytes = parse_size(max_s);
    NVST_REQUIRE(opts.min_bytes >= 1 && opts.min_bytes <= opts.max_bytes, "need 1 <= minbytes <= maxbytes, got ",
                 opts.min_bytes, " and ", opts.max_bytes);
    std::string which = bench->get_option("which")->empty() ? "all" : bench->get_option("which")->as<std::string>();
    if (nvst::is_pe_process()) {
      // Already a PE (spawned by us, torchrun or mpirun): run the one asked.
      if (which == "host") return nvst::tools::bench_host(opts);
      if (which == "fifo") return nvst::tools::bench_fifo(opts);
      if (which == "coll") return nvst::tools::bench_coll(opts);
      if (which == "ep") return nvst::tools::bench_ep(opts);
      return nvst::tools::bench_p2p(opts);
    }
    const int gpus = nvst::tools::gpu_count();
    int rc = 0;
    if (which == "p2p" || (which == "all" && gpus >= 2)) {
      // One GPU split into logical nodes of one PE: both PEs on it, the
      // proxy path between them (NCCL's column is left out there).
      const bool one_gpu_nodes = gpus == 1 && nvst::settings::node_size() == 1;
      NVST_REQUIRE(gpus >= 2 || one_gpu_nodes, "nvst bench p2p needs 2 GPUs, or one with NVST_NODE_SIZE=1 (the proxy ",
                   "path between two PEs on it); ", gpus, " visible");
      std::printf("# nvst bench p2p: %d GPU(s) visible, PE 0 -> PE 1\n", gpus);
      std::fflush(stdout);
      g_argv = pe_argv(g_argv, "p2p", opts);
      rc = run_as_job(np ? np : 2, {}, nvst::tools::bench_p2p, opts);
    }
    if (which == "coll" || (which == "all" && gpus >= 2)) {
      // With one GPU, `--np N` PEs share it: ours only (NCCL refuses that), to check -d and -o, not to time.
      NVST_REQUIRE(gpus >= 2 || (which == "coll" && gpus == 1 && np >= 2), "nvst bench coll needs 2 GPUs (or one ",
                   "shared by --np 2 or more PEs, ours only, to check results); ", gpus, " visible");
      std::printf(
          "# nvst bench coll: all_reduce, all_gather, reduce_scatter and all_to_all on %d GPUs, ours and NCCL\n",
          np ? np : gpus);
      std::fflush(stdout);
      BenchOptions co = opts;
      if (which == "all") {
        co.max_bytes = std::min<std::size_t>(co.max_bytes, std::size_t{256} << 20);
        if (!co.json_path.empty()) co.json_path += ".coll.json";
      }
      g_argv = pe_argv(g_argv, "coll", co);
      int rc2 = run_as_job(np ? np : gpus, {}, nvst::tools::bench_coll, co);
      if (rc == 0) rc = rc2;
    }
    if (which == "ep" || (which == "all" && gpus >= 2)) {
      // One GPU: one PE, the whole path without a wire (the floor every GPU count pays).
      NVST_REQUIRE(gpus >= 1, "nvst bench ep needs a GPU; none visible");
      std::printf("# nvst bench ep: MoE dispatch/combine on %d GPU(s), ours and NCCL all-to-all-v\n", np ? np : gpus);
      std::fflush(stdout);
      BenchOptions eo = opts;
      if (!eo.json_path.empty() && which == "all") eo.json_path += ".ep.json";
      g_argv = pe_argv(g_argv, "ep", eo);
      int rc2 = run_as_job(np ? np : gpus, {}, nvst::tools::bench_ep, eo);
      if (rc == 0) rc = rc2;
    }
    // The FIFO needs one GPU: PE 0's kernels post no-ops to its own proxy and
    // PE 1 (another logical node, sharing the GPU when there is one) idles.
    if (which == "fifo" || (which == "all" && gpus >= 1)) {
      NVST_REQUIRE(gpus >= 1, "nvst bench fifo needs a GPU; none visible");
      std::printf("# nvst bench fifo: GPU -> proxy command rate (2 PEs, NVST_NODE_SIZE=1)\n");
      std::fflush(stdout);
      BenchOptions fo = opts;
      if (!fo.json_path.empty() && which == "all") fo.json_path += ".fifo.json";
      g_argv = pe_argv(g_argv, "fifo", fo);
      int rc2 = run_as_job(2, {{"NVST_NODE_SIZE", "1"}}, nvst::tools::bench_fifo, fo);
      if (rc == 0) rc = rc2;
    }
    if (which == "host" || (which == "all" && gpus < 2)) {
      if (gpus == 0)
        std::printf("# no GPU found: running host-side benchmarks only (host-memory PEs)\n");
      else if (which == "all")
        std::printf("# %d GPU visible: p2p, coll and ep need 2; ran fifo, now the host-side benchmarks\n", gpus);
      std::fflush(stdout);
      g_argv = pe_argv(g_argv, "host", opts);
      // No more PEs than cores unless asked: each PE runs two busy threads
      // (its own and its proxy's), and PEs waiting for a core measure the
      // scheduler, not the transport.
      const int host_np = np ? np : std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 2, 4);
      int rc2 = run_as_job(host_np, {{"NVST_HEAP", "host"}}, nvst::tools::bench_host, opts);
      if (rc == 0) rc = rc2;
    }
    return rc;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nvst: error: %s\n", e.what());
    return 1;
  }
}
