#!/usr/bin/env bash
# One round on a lent GPU machine: the GPU tests and benchmarks the issues
# ask for, logs and JSON under $OUT (or ./device-out), a short summary last.
# Usage: bash scripts/device_round.sh BIN_DIR MODE
#   shared  one GPU: PEs time-share it (correctness only, no timings): the
#           device API, collectives at 2 and 4 PEs, EP, the proxy path, torch
#   quick   2+ GPUs: tests, no sanitizer, short benchmark
#   internode  2 GPUs as 2 logical nodes: the proxy path only
#   shared-coll  one GPU: collectives at 2 and 4 PEs on one node, then 3
#           logical nodes of 1 (correctness only)
#   shared-check  one GPU: collectives at 2 PEs on one node and as 1+1
#           nodes, and the device API across nodes (a quick recheck)
#   shared-coll-internode  one GPU: collectives across logical nodes, 2 PEs
#           as 1+1; shared-coll-2x2: 4 PEs as 2x2 (correctness only)
#   shared-ep-nodes  one GPU: the EP Buffer as 1+1 logical nodes, on one
#           node at 2 PEs (regression), then as 2x2 (correctness only)
#   shared-ep-hier  one GPU: the EP suite on one node (2 PEs), then the
#           hierarchical dispatch as 1+1, 2x2 and 3x2 logical nodes
#   shared-ep-hier-san  one GPU: memcheck, tcp and a longer stress over the
#           relays as 2x2 logical nodes
#   shared-ep-stress  one GPU: 10^4 random routings (10^3 low latency) as
#           2x2 logical nodes; shared-ep-san: memcheck and tcp as 1+1
#   shared-torch-nodes  one GPU: the Python package's cross-node checks
#           (ep.Buffer included) at 2 and 3 ranks of a logical node each
#   shared-torch-nvshmem  one GPU: the Python package on the NVSHMEM backend
#           (1 rank, and 2 sharing the GPU on gloo), then on ours
#   shared-nvshmem4py  one GPU: nvshmem4py starts NVSHMEM and the package
#           joins it (the cp312 wheel of nvshmem4py-cu13 0.4.1 in
#           BIN/../wheels312, carried), 1 rank and 2 sharing the GPU
#   shared-proxy  one GPU: the proxy path only, PEs time-sharing it, with the
#           proxy's counters (refused posts, most in flight) on stderr
#   coll    collectives: tests and `nvst bench coll`
#   ep      expert-parallel Buffer: tests, sanitizers, `nvst bench ep`
#   torch   2+ GPUs: the Python package rebuilt for this machine's Python,
#           then the PyTorch job under torchrun (BIN_DIR/.. is the build)
#   regress 2+ GPUs: each GPU suite at 2 PEs, bench coll (NVSHMEM column)
#   pipinstall  2+ GPUs: `pip install .` on that machine, the torch job from it
#   nvshmem 2+ GPUs: device-API and collective tests on NVSHMEM and on ours
#   full    2+ GPUs: tests at 2 and 4 PEs (as many as present), sanitizers,
#           the full p2p benchmark (NVST_BENCH_SWEEP=1 adds calibration rows)
#   nodes-api  4+ GPUs as 2x2 logical nodes: device API (tcp, shm,
#           memcheck), collectives; nodes-ep: EP (10^4 random routings,
#           memcheck), bench ep
#   scripts/x4_round.sh runs these in the four calls a 4-GPU machine needs
set -uo pipefail
BIN=${1:?bin dir with nvst and nvst_gpu_tests}
MODE=${2:-full}
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NVST_DEVICE_TIMEOUT_S=${NVST_DEVICE_TIMEOUT_S:-20} NVST_TIMEOUT_S=${NVST_TIMEOUT_S:-60}
GPUS=$(nvidia-smi -L 2>/dev/null | wc -l)
summary="$OUT/summary.txt"; : > "$summary"
step() {  # step NAME TIMEOUT CMD...: runs, logs, records rc and the last verdict line
  local name=$1 t=$2; shift 2
  local t0=$SECONDS
  timeout -k 5 "$t" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  printf '%-24s rc=%-3d %4ds  %s\n' "$name" "$rc" $((SECONDS - t0)) \
    "$(grep -E 'passed|failed|PASS|FAIL|ERROR|error' "$OUT/$name.log" | tail -1 | cut -c1-150)" | tee -a "$summary"
}
{ nvidia-smi; nvidia-smi topo -m; ldd "$BIN/nvst" | grep -E 'nccl|fabric|cuda'; } > "$OUT/machine.log" 2>&1
echo "gpus=$GPUS mode=$MODE commit=$(cat "$BIN/../COMMIT" 2>/dev/null)" | tee -a "$summary"
step info 60 "$BIN/nvst" info
# Programs linked to NVSHMEM find the wheel's libnvshmem_host.so.3 this way.
use_nvshmem_wheel() {
  local lib
  lib=$(python3 -c "import nvidia,os;print(os.path.join(list(nvidia.__path__)[0],'nvshmem','lib'))")
  export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}
# NVST_TEST_SANITIZER: the suites leave out what CUDA's rules forbid on purpose (test_device_api.cu).
SAN="env NVST_TEST_SANITIZER=1 compute-sanitizer --target-processes all --error-exitcode 9 --print-limit 20"
case "$MODE" in
  shared)
    export NVST_TEST_SHARE_GPUS=1
    step selftest_2pe 120 "$BIN/nvst" selftest --np 2
    step gpu_api_2pe 240 "$BIN/nvst_gpu_tests" --np 2
    step gpu_errors 120 "$BIN/nvst_gpu_tests" --mode errors --np 2
    step coll_2pe 200 "$BIN/nvst_coll_tests" --np 2
    step coll_4pe 300 "$BIN/nvst_coll_tests" --np 4
    step ep_2pe 200 "$BIN/nvst_ep_tests" --np 2 --stress 500
    NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER="tcp;ofi_rxm" step gpu_internode_tcp 200 "$BIN/nvst_gpu_tests" --np 2
    NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=shm step gpu_internode_shm 200 "$BIN/nvst_gpu_tests" --np 2
    step memcheck_2pe 300 $SAN --tool memcheck "$BIN/nvst_gpu_tests" --np 2 --rounds 1
    # The PyTorch half (BIN/.. is the build): one rank, then 3 ranks as
    # logical nodes sharing the GPU (torch.distributed on gloo).
    step py_module 120 bash scripts/build_python_module.sh "$BIN/.." python3
    PYTHONPATH="$BIN/../python" step torch_1pe 150 python3 -m torch.distributed.run --standalone --nproc_per_node=1 tests/python/torch_job.py
    NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=shm PYTHONPATH="$BIN/../python" step torch_3pe_internode 150 \
      python3 -m torch.distributed.run --standalone --nproc_per_node=3 tests/python/torch_job.py
    ;;
  quick|full)
    step selftest 120 "$BIN/nvst" selftest
    step gpu_api_2pe 240 "$BIN/nvst_gpu_tests" --np 2
    if [ "$GPUS" -ge 4 ]; then step gpu_api_4pe 240 "$BIN/nvst_gpu_tests" --np 4
    else NVST_TEST_SHARE_GPUS=1 step gpu_api_4pe_shared 240 "$BIN/nvst_gpu_tests" --np 4; fi
    step gpu_errors 120 "$BIN/nvst_gpu_tests" --mode errors --np 2
    # Two logical nodes of one GPU each: everything between them goes
    # through the proxy (issue 3), over tcp;ofi_rxm and over shm.
    NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER="tcp;ofi_rxm" step gpu_internode_tcp 300 "$BIN/nvst_gpu_tests" --np 2
    NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=shm step gpu_internode_shm 300 "$BIN/nvst_gpu_tests" --np 2
    NVST_NODE_SIZE=1 step bench_fifo 120 "$BIN/nvst" bench fifo --json "$OUT/fifo.json"
    NVST_NODE_SIZE=1 step bench_p2p_internode 300 "$BIN/nvst" bench p2p -b 4K -e 256M -f 4 --json "$OUT/p2p_internode.json"
    if [ "$MODE" = full ]; then
      NVST_NODE_SIZE=1 step memcheck_internode 300 $SAN --tool memcheck "$BIN/nvst_gpu_tests" --np 2 --rounds 1
      step memcheck_2pe 300 $SAN --tool memcheck "$BIN/nvst_gpu_tests" --np 2 --rounds 1
      step racecheck_2pe 300 $SAN --tool racecheck "$BIN/nvst_gpu_tests" --np 2 --rounds 1
      step bench_p2p 500 "$BIN/nvst" bench p2p -b 4K -e 1G -f 2 --json "$OUT/p2p.json"
      [ -n "${NVST_BENCH_SWEEP:-}" ] && step bench_p2p_sweep 300 "$BIN/nvst" bench p2p -b 16M -e 1G -f 4 --json "$OUT/p2p_sweep.json"
    else
      step bench_p2p 200 "$BIN/nvst" bench p2p -b 4K -e 64M -f 4 -n 10 --json "$OUT/p2p.json"
    fi
    ;;
  coll)  # collectives (issue 4): correctness at 2 and 4 PEs, then the benchmark
    step coll_2pe 300 "$BIN/nvst_coll_tests" --np 2
    if [ "$GPUS" -ge 4 ]; then step coll_4pe 300 "$BIN/nvst_coll_tests" --np 4
    else NVST_TEST_SHARE_GPUS=1 step coll_4pe_shared 300 "$BIN/nvst_coll_tests" --np 4; fi
    step memcheck_coll 300 $SAN --tool memcheck "$BIN/nvst_coll_tests" --np 2
    step bench_coll 300 "$BIN/nvst" bench coll -b 1K -e 256M -f 4 --json "$OUT/coll.json"
    # The algorithms forced, to calibrate auto (NVST_COLL_ALGO).
    NVST_COLL_ALGO=oneshot step bench_coll_oneshot 300 "$BIN/nvst" bench coll -b 1K -e 256M -f 4 --json "$OUT/coll_oneshot.json"
    NVST_COLL_ALGO=twoshot step bench_coll_twoshot 300 "$BIN/nvst" bench coll -b 1K -e 256M -f 4 --json "$OUT/coll_twoshot.json"
    ;;
  ep)  # expert-parallel Buffer (issue 5): correctness, sanitizers, benchmark
    step ep_2pe 400 "$BIN/nvst_ep_tests" --np 2 --stress 10000
    if [ "$GPUS" -ge 4 ]; then step ep_4pe 400 "$BIN/nvst_ep_tests" --np 4 --stress 2000
    else NVST_TEST_SHARE_GPUS=1 step ep_4pe_shared 300 "$BIN/nvst_ep_tests" --np 4 --stress 500; fi
    step memcheck_ep 300 $SAN --tool memcheck "$BIN/nvst_ep_tests" --np 2 --stress 20
    step racecheck_ep 300 $SAN --tool racecheck "$BIN/nvst_ep_tests" --np 2 --stress 5
    step bench_ep 300 "$BIN/nvst" bench ep --json "$OUT/ep.json"
    ;;
  torch)  # the PyTorch half of the Python package (issue 6)
    step py_module 240 bash scripts/build_python_module.sh "$BIN/.." python3
    export PYTHONPATH="$BIN/../python"
    step torch_2pe 600 python3 -m torch.distributed.run --standalone --nproc_per_node=2 tests/python/torch_job.py
    [ "$GPUS" -ge 4 ] && step torch_4pe 600 python3 -m torch.distributed.run --standalone --nproc_per_node=4 tests/python/torch_job.py
    NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER="tcp;ofi_rxm" NVST_TEST_SIDE_STREAM=1 step torch_2pe_internode_side 300 python3 -m torch.distributed.run --standalone --nproc_per_node=2 tests/python/torch_job.py
    NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER="tcp;ofi_rxm" step torch_2pe_internode 300 python3 -m torch.distributed.run --standalone --nproc_per_node=2 tests/python/torch_job.py
    step torch_example 120 python3 -m torch.distributed.run --standalone --nproc_per_node=2 examples/torch_quickstart.py
    # The bench's NVSHMEM column, where the nvshmem4py wheel was carried (BIN/../wheels312, as shared-nvshmem4py).
    BENCH_PATH=$PYTHONPATH
    if ls "$BIN"/../wheels312/nvshmem4py*.whl > /dev/null 2>&1; then
      step pip_nvshmem4py 120 python3 -m pip install -q --no-deps --target /tmp/nvshmem4py "$BIN"/../wheels312/nvshmem4py*.whl
      BENCH_PATH="$PYTHONPATH:/tmp/nvshmem4py"
      use_nvshmem_wheel
    fi
    PYTHONPATH=$BENCH_PATH step torch_bench 400 python3 -m torch.distributed.run --standalone --nproc_per_node=2 -m nvshmem_tutorial.bench --json "$OUT/torch_bench.json"
    [ -n "${NVST_ROUND_PYTEST:-}" ] && step pytest_python 1200 python3 -m pytest -q -p no:cacheprovider tests/python
    ;;
  regress)  # every GPU suite once at 2 PEs, then bench coll with its NVSHMEM column
    step gpu_api_2pe 240 "$BIN/nvst_gpu_tests" --np 2
    NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER="tcp;ofi_rxm" step gpu_internode_tcp 300 "$BIN/nvst_gpu_tests" --np 2
    step coll_2pe 300 "$BIN/nvst_coll_tests" --np 2
    step ep_2pe 300 "$BIN/nvst_ep_tests" --np 2 --stress 1000
    step bench_coll 400 "$BIN/nvst" bench coll -b 1K -e 64M -f 4 -G 20 --json "$OUT/coll.json"
    ;;
  pipinstall)  # the README's `pip install --no-build-isolation .` there, then the torch job from it
    # The GPU machines have libfabric's runtime but not its headers: use the
    # ones carried in FABRIC_INC (a copy of this machine's /usr/include/rdma).
    if [ ! -f /usr/include/rdma/fabric.h ]; then
      export SKBUILD_CMAKE_ARGS="-DFABRIC_INCLUDE_DIR=$PWD/${FABRIC_INC:?};-DFABRIC_LIBRARY=$(ls /lib/x86_64-linux-gnu/libfabric.so.1 /usr/lib/x86_64-linux-gnu/libfabric.so.1 2>/dev/null | head -1)"
    fi
    DEST=$(mktemp -d)
    step pip_install 560 python3 -m pip install --no-build-isolation --no-deps --target "$DEST" .
    PYTHONPATH="$DEST" step torch_2pe_pip 300 python3 -m torch.distributed.run --standalone --nproc_per_node=2 tests/python/torch_job.py
    PYTHONPATH="$DEST" step torch_example_pip 120 python3 -m torch.distributed.run --standalone --nproc_per_node=2 examples/torch_quickstart.py
    ;;
  nvshmem)  # the NVSHMEM backend (issue 8): the same test binaries on both backends
    # libnvshmem_host.so.3 from this machine's nvidia-nvshmem wheel.
    use_nvshmem_wheel
    NVST_BACKEND=nvshmem step gpu_api_nvshmem_2pe 240 "$BIN/nvst_gpu_tests_nvshmem" --np 2
    NVST_BACKEND=nvshmem step coll_nvshmem_2pe 300 "$BIN/nvst_coll_tests_nvshmem" --np 2
    step gpu_api_ours_in_nvshmem_build 240 "$BIN/nvst_gpu_tests_nvshmem" --np 2
    step coll_ours_in_nvshmem_build 300 "$BIN/nvst_coll_tests_nvshmem" --np 2
    NVST_BACKEND=nvshmem step gpu_api_plain_build_refuses 60 "$BIN/nvst_gpu_tests" --np 2
    ;;
  shared-proxy)  # one GPU, the proxy path over both providers, then the NVLink path as a control
    export NVST_TEST_SHARE_GPUS=1 NVST_PROXY_DEBUG=1
    NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER="tcp;ofi_rxm" step gpu_internode_tcp 200 "$BIN/nvst_gpu_tests" --np 2
    NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=shm step gpu_internode_shm 200 "$BIN/nvst_gpu_tests" --np 2
    NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=shm step gpu_internode_shm_3pe 200 "$BIN/nvst_gpu_tests" --np 3
    step gpu_api_2pe 240 "$BIN/nvst_gpu_tests" --np 2
    ;;
  shared-coll-internode)  # one GPU: collectives across logical nodes (through the proxy), 1+1 (113 s in r21)
    export NVST_TEST_SHARE_GPUS=1 NVST_FABRIC_PROVIDER=shm
    NVST_NODE_SIZE=1 step coll_internode_2pe 240 "$BIN/nvst_coll_tests" --np 2
    ;;
  shared-coll)  # one GPU: the collectives on one node at 2 and 4 PEs, then across 3 logical nodes of 1
    export NVST_TEST_SHARE_GPUS=1
    step coll_2pe 150 "$BIN/nvst_coll_tests" --np 2
    step coll_4pe_shared 240 "$BIN/nvst_coll_tests" --np 4
    NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=shm step coll_internode_3pe 300 "$BIN/nvst_coll_tests" --np 3
    ;;
  shared-check)  # one GPU, after a refactor: the collectives at 2 PEs on one node and as 1+1 nodes, the proxy path
    export NVST_TEST_SHARE_GPUS=1
    step coll_2pe 150 "$BIN/nvst_coll_tests" --np 2
    NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=shm step coll_internode_2pe 280 "$BIN/nvst_coll_tests" --np 2
    NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=shm step gpu_internode_shm 120 "$BIN/nvst_gpu_tests" --np 2
    ;;
  shared-ep-nodes)  # one GPU: EP dispatch/combine (both modes) across logical nodes, and on one node as before
    export NVST_TEST_SHARE_GPUS=1 NVST_FABRIC_PROVIDER=shm
    NVST_NODE_SIZE=1 step ep_internode_2pe 200 "$BIN/nvst_ep_tests" --np 2 --stress ${EP_STRESS:-300} --ll-stress ${EP_LL_STRESS:-100}
    step ep_2pe 150 "$BIN/nvst_ep_tests" --np 2 --stress 1000 --ll-stress 200
    NVST_NODE_SIZE=2 step ep_2x2 240 "$BIN/nvst_ep_tests" --np 4 --stress ${EP_STRESS:-300} --ll-stress ${EP_LL_STRESS:-100}
    ;;
  shared-ep-hier)  # one GPU: the hierarchical dispatch (relays) as 1+1, 2x2 and 3x2 logical nodes
    export NVST_TEST_SHARE_GPUS=1 NVST_FABRIC_PROVIDER=shm
    step ep_2pe 120 "$BIN/nvst_ep_tests" --np 2 --stress ${EP_STRESS:-300} --ll-stress 50
    NVST_NODE_SIZE=1 step ep_1x1 150 "$BIN/nvst_ep_tests" --np 2 --stress ${EP_STRESS:-300} --ll-stress 50
    NVST_NODE_SIZE=2 step ep_2x2 200 "$BIN/nvst_ep_tests" --np 4 --stress ${EP_STRESS:-300} --ll-stress 50
    NVST_NODE_SIZE=2 step ep_3x2 220 "$BIN/nvst_ep_tests" --np 6 --stress ${EP_STRESS_6:-100} --ll-stress 20
    ;;
  shared-ep-hier-san)  # one GPU: memcheck over the relays (2x2), the tcp provider (2x2), a longer stress (2x2)
    export NVST_TEST_SHARE_GPUS=1 NVST_NODE_SIZE=2
    NVST_FABRIC_PROVIDER=shm step memcheck_ep_2x2 220 $SAN --tool memcheck "$BIN/nvst_ep_tests" --np 4 --stress 10 --ll-stress 5
    NVST_FABRIC_PROVIDER="tcp;ofi_rxm" step ep_2x2_tcp 120 "$BIN/nvst_ep_tests" --np 4 --stress 200 --ll-stress 20
    NVST_FABRIC_PROVIDER=shm step ep_2x2_stress 200 "$BIN/nvst_ep_tests" --np 4 --stress ${EP_STRESS:-2000} --ll-stress 100
    ;;
  shared-ep-stress)  # one GPU: the issue's 10^4 iterations, as 2x2 logical nodes
    export NVST_TEST_SHARE_GPUS=1 NVST_FABRIC_PROVIDER=shm
    NVST_NODE_SIZE=2 step ep_2x2_stress 560 "$BIN/nvst_ep_tests" --np 4 --stress 10000 --ll-stress 1000
    ;;
  shared-ep-san)  # one GPU: compute-sanitizer over the cross-node EP path, and the tcp provider
    export NVST_TEST_SHARE_GPUS=1
    NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=shm step memcheck_ep_internode 300 $SAN --tool memcheck "$BIN/nvst_ep_tests" --np 2 --stress 10 --ll-stress 5
    NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER="tcp;ofi_rxm" step ep_internode_tcp 200 "$BIN/nvst_ep_tests" --np 2 --stress 500 --ll-stress 200
    ;;
  shared-torch-nodes)  # one GPU: torch_job.py's cross-node checks on gloo (BIN/.. is the build)
    export NVST_TEST_SHARE_GPUS=1 NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=shm
    step py_module 240 bash scripts/build_python_module.sh "$BIN/.." python3
    export PYTHONPATH="$BIN/../python"
    step torch_2pe_internode 200 python3 -m torch.distributed.run --standalone --nproc_per_node=2 tests/python/torch_job.py
    step torch_3pe_internode 200 python3 -m torch.distributed.run --standalone --nproc_per_node=3 tests/python/torch_job.py
    ;;
  shared-torch-nvshmem)  # one GPU: the Python package on the NVSHMEM backend (issues 6, 8), and on ours as a control
    step py_module 240 bash scripts/build_python_module.sh "$BIN/.." python3
    export PYTHONPATH="$BIN/../python"
    use_nvshmem_wheel
    TR="python3 -m torch.distributed.run --standalone"
    NVST_BACKEND=nvshmem step torch_1pe_nvshmem 200 $TR --nproc_per_node=1 tests/python/torch_job.py
    step torch_1pe_ours 200 $TR --nproc_per_node=1 tests/python/torch_job.py
    NVST_TEST_SHARE_GPUS=1 NVST_BACKEND=nvshmem step torch_2pe_shared_nvshmem 200 $TR --nproc_per_node=2 tests/python/torch_job.py
    NVST_TEST_SHARE_GPUS=1 step torch_2pe_shared_ours 200 $TR --nproc_per_node=2 tests/python/torch_job.py
    NVST_TEST_SHARE_GPUS=1 NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=shm step torch_2pe_internode 200 $TR --nproc_per_node=2 tests/python/torch_job.py
    ;;
  shared-clients)  # one GPU: code written for the seed, DeepEP and pplx; the peer suites from .dev/peers if carried
    step py_module 240 bash scripts/build_python_module.sh "$BIN/.." python3
    PY_DIR=$(cd "$BIN/../python" && pwd)
    export PYTHONPATH="$PY_DIR"
    step clients_gpu 900 python3 -m pytest -q tests/python/test_clients_gpu.py
    if [ -d .dev/peers ]; then
      step seed_tma_copy 120 python3 .dev/peers/seed/tests/test_tma_copy.py
      (cd .dev/peers/deepep/tests && PYTHONPATH="..:$PY_DIR" \
        step deepep_intranode 900 env -u NVST_SYMMETRIC_SIZE python3 test_intranode.py --num-processes 1)
      (cd .dev/peers/deepep/tests && PYTHONPATH="..:$PY_DIR" \
        step deepep_low_latency 600 env -u NVST_SYMMETRIC_SIZE python3 test_low_latency.py --num-processes 1)
    fi
    ;;
  shared-nvshmem4py)  # one GPU: nvshmem4py starts NVSHMEM, the Python package joins it (wheel: BIN/../wheels312)
    # The machines have its dependencies (cuda-core, cuda-bindings, cuda-pathfinder, with torch), not it.
    step py_module 240 bash scripts/build_python_module.sh "$BIN/.." python3
    step pip_nvshmem4py 120 python3 -m pip install -q --no-deps --target /tmp/nvshmem4py "$BIN"/../wheels312/nvshmem4py*.whl
    export PYTHONPATH="$BIN/../python:/tmp/nvshmem4py" NVSHMEM_SYMMETRIC_SIZE=3G
    use_nvshmem_wheel
    TR="python3 -m torch.distributed.run --standalone"
    step nvshmem4py_1pe 200 $TR --nproc_per_node=1 tests/python/nvshmem4py_job.py
    NVST_TEST_SHARE_GPUS=1 step nvshmem4py_2pe_shared 200 $TR --nproc_per_node=2 tests/python/nvshmem4py_job.py
    NVST_BACKEND=nvshmem step torch_1pe_nvshmem 200 $TR --nproc_per_node=1 tests/python/torch_job.py
    ;;
  shared-coll-2x2)  # one GPU, 4 PEs as 2x2 logical nodes (over 250 s in r21: a call of its own)
    export NVST_TEST_SHARE_GPUS=1 NVST_FABRIC_PROVIDER=shm
    NVST_NODE_SIZE=2 step coll_2x2 540 "$BIN/nvst_coll_tests" --np 4
    ;;
  shared-coll-hier)  # one GPU: only the hierarchical collectives, at 2x2 logical nodes and on one node (4 PEs)
    export NVST_TEST_SHARE_GPUS=1 NVST_FABRIC_PROVIDER=shm
    NVST_NODE_SIZE=2 step coll_hier_2x2 300 "$BIN/nvst_coll_tests" --np 4 --only hierarchical
    step coll_hier_1x4 200 "$BIN/nvst_coll_tests" --np 4 --only hierarchical
    ;;
  internode)  # only the proxy path (issue 3), with its state on stderr
    export NVST_PROXY_DEBUG=1
    NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER="tcp;ofi_rxm" step gpu_internode_tcp 300 "$BIN/nvst_gpu_tests" --np 2
    NVST_NODE_SIZE=1 step bench_fifo 120 "$BIN/nvst" bench fifo --json "$OUT/fifo.json"
    NVST_NODE_SIZE=1 step bench_p2p_internode 300 "$BIN/nvst" bench p2p -b 4K -e 256M -f 4 --json "$OUT/p2p_internode.json"
    NVST_NODE_SIZE=1 step memcheck_internode 300 $SAN --tool memcheck "$BIN/nvst_gpu_tests" --np 2 --rounds 1
    NVST_NODE_SIZE=1 step racecheck_internode 300 $SAN --tool racecheck "$BIN/nvst_gpu_tests" --np 2 --rounds 1
    ;;
  nodes-api|nodes-ep)  # 4+ GPUs as 2x2 logical nodes (issues 3-5): NVLink inside a node, the proxy between nodes
    [ "$GPUS" -ge 4 ] || { echo "mode $MODE needs 4 GPUs; $GPUS here" | tee -a "$summary"; exit 2; }
    export NVST_NODE_SIZE=2
    if [ "$MODE" = nodes-api ]; then
      NVST_FABRIC_PROVIDER="tcp;ofi_rxm" step gpu_2x2_tcp 300 "$BIN/nvst_gpu_tests" --np 4
      NVST_FABRIC_PROVIDER=shm step gpu_2x2_shm 300 "$BIN/nvst_gpu_tests" --np 4
      step memcheck_2x2 300 $SAN --tool memcheck "$BIN/nvst_gpu_tests" --np 4 --rounds 1
      step coll_2x2 300 "$BIN/nvst_coll_tests" --np 4
    else
      step ep_2x2 400 "$BIN/nvst_ep_tests" --np 4 --stress ${EP_STRESS:-10000} --ll-stress ${EP_LL_STRESS:-1000}
      step memcheck_ep_2x2 300 $SAN --tool memcheck "$BIN/nvst_ep_tests" --np 4 --stress 10
      step bench_ep_2x2 300 "$BIN/nvst" bench ep --json "$OUT/ep_2x2.json"
    fi
    ;;
  *) echo "unknown mode $MODE" >&2; exit 2 ;;
esac
echo "--- summary"; cat "$summary"
for f in "$OUT"/*.log; do  # the first failure of each failing log
  grep -qE '^FAIL|rc=[1-9]|ERROR SUMMARY: [1-9]' "$f" && { echo "--- $f"; grep -E '^FAIL|error|ERROR' "$f" | head -8; }
done
[ -f "$OUT/bench_p2p.log" ] && { echo "--- p2p table"; sed -n '/^# op: put /,/^$/p' "$OUT/bench_p2p.log"; grep pingpong -A2 "$OUT/bench_p2p.log"; }
[ -f "$OUT/bench_p2p_internode.log" ] && { echo "--- p2p internode"; grep -v '^# progress' "$OUT/bench_p2p_internode.log" | tail -20; }
[ -f "$OUT/bench_coll.log" ] && { echo "--- coll"; grep -v '^# progress' "$OUT/bench_coll.log" | tail -45; }
[ -f "$OUT/bench_ep.log" ] && { echo "--- ep"; grep -v '^# progress' "$OUT/bench_ep.log" | tail -60; }
for f in "$OUT"/torch_[0-9]*.log; do [ -f "$f" ] && { echo "--- $f"; grep -E 'FAIL|DONE|Error|error' "$f" | head -40; }; done
[ -f "$OUT/torch_example.log" ] && { echo "--- torch example"; tail -4 "$OUT/torch_example.log"; }
[ -f "$OUT/torch_bench.log" ] && { echo "--- torch bench"; grep -v '^\[' "$OUT/torch_bench.log" | tail -30; }
[ -f "$OUT/bench_fifo.log" ] && { echo "--- fifo"; grep '^# fifo' "$OUT/bench_fifo.log"; }
# The device tool returns at most 8 files: ship the logs as one archive.
(cd "$OUT" && tar czf logs.tgz ./*.log && rm -f ./*.log)
exit 0
