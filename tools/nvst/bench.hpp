// Benchmarks of the `nvst bench` command. Each runs inside every PE of a job
// (nvst spawns the PEs, or torchrun/mpirun did) and initialises the runtime
// itself, because the heap it needs depends on the sizes asked for.
#pragma once

#include <cstddef>
#include <string>

namespace nvst::tools {

// nccl-tests' flags where they mean the same thing.
struct BenchOptions {
  std::size_t min_bytes = 4096;                  // -b
  std::size_t max_bytes = std::size_t{1} << 30;  // -e
  double factor = 2.0;                           // -f
  int iters = 20;                                // -n: timed iterations per sample
  int warmup = 5;                                // -w
  int samples = 5;                               // timed samples; the median is reported
  bool check = true;                             // -c: verify data (#wrong column)
  std::string json_path;                         // --json: write results here (rank 0)
  std::string label;                             // free text stored in the JSON
  int graph_iters = 20;                          // -G: operations per CUDA graph (bench coll)
  std::string datatype = "bfloat16";             // -d (bench coll): bfloat16, half, float, int32, int64
  std::string redop = "sum";                     // -o (bench coll): sum, prod, max, min
};

// NCCL refuses two ranks on one GPU, so its baseline columns need a GPU per
// PE. After nvst::init: "" when every PE has a GPU of its own, else which
// two PEs share which one (logical nodes on a machine of one GPU,
// NVST_TEST_SHARE_GPUS).
std::string pes_sharing_a_gpu();

// Point-to-point between PE 0 and PE 1 (needs 2 PEs with GPUs). Returns the
// process exit code.
int bench_p2p(const BenchOptions& options);
// The same between PEs of different (logical) nodes: through the proxy, with
// raw libfabric and NCCL's network transport as baselines. bench_p2p calls
// it when PE 1 is on another node (after nvst::init).
int bench_p2p_internode(const BenchOptions& options);
// all_reduce, all_gather, reduce_scatter and all_to_all: ours, NCCL and (where
// its plugin loads) NVSHMEM, eager and under CUDA graphs.
int bench_coll(const BenchOptions& options);
// Expert-parallel dispatch/combine (nvst::ep::Buffer) at DeepEP's shapes,
// against NCCL all-to-all-v of the same routing.
int bench_ep(const BenchOptions& options);
// GPU -> proxy command rate (needs a proxy: NVST_NODE_SIZE=1 and 2 PEs).
int bench_fifo(const BenchOptions& options);
// What runs without a GPU: bootstrap latency and host heap operations.
int bench_host(const BenchOptions& options);

}  // namespace nvst::tools
