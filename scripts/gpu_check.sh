#!/usr/bin/env bash
# Runs every GPU test suite this machine allows and prints a summary table
# (suite, settings, result, seconds). Exits non-zero if any suite failed.
#
#   bash scripts/gpu_check.sh [--quick] [--sanitizers] [--only REGEX] [--out DIR]
#
#   --quick       one pass of each kind (2 PEs, one node and 1+1 logical nodes,
#                 fewer random routings): minutes instead of tens of minutes
#   --sanitizers  add compute-sanitizer memcheck and racecheck passes
#   --only REGEX  run only the suites whose name matches (e.g. 'nodes|ep')
#   --out DIR     where the logs go (default: a new temporary folder)
#   --peers DIR   also run other projects' own tests from DIR, unmodified, on
#                 this package: DIR/deepep (DeepEP v1.2.1's deep_ep/ and tests/,
#                 deep_ep/ re-exporting nvshmem_tutorial.ep) and DIR/seed (the
#                 seed tutorial's tests/)
#
# With one GPU the PEs share it (NVST_TEST_SHARE_GPUS=1: correctness, not
# timing). Logical nodes (NVST_NODE_SIZE) put the proxy and libfabric between
# PEs of one host: 1+1 over shm and tcp, and 2x2. The NVSHMEM backend's suites
# run where the build found NVSHMEM, the PyTorch tests where PyTorch imports.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh

QUICK=0 SAN=0 ONLY="" OUT_DIR="" PEERS=""
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1 ;;
    --sanitizers) SAN=1 ;;
    --only) ONLY=${2:?--only needs a regular expression}; shift ;;
    --out) OUT_DIR=${2:?--out needs a folder}; shift ;;
    --peers) PEERS=$(cd "${2:?--peers needs a folder}" && pwd) || exit 2; shift ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_check: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "$GPUS" -lt 1 ]; then
  echo "gpu_check: no GPU visible (nvidia-smi -L lists none); scripts/test.sh runs the host tests" >&2
  exit 2
fi
if [ ! -x "$BUILD_DIR/bin/nvst_gpu_tests" ]; then
  echo "gpu_check: no build in $BUILD_DIR; building (bash scripts/build.sh)"
  bash scripts/install_deps.sh && bash scripts/build.sh || exit 1
fi
LOG_DIR=${OUT_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/nvst-gpu-check.XXXXXX")}
mkdir -p "$LOG_DIR" && LOG_DIR=$(cd "$LOG_DIR" && pwd) || exit 2
source scripts/steps.sh
B="$BUILD_DIR/bin"
# Bounded waits, shorter than the library's defaults, so a failure shows fast.
export NVST_DEVICE_TIMEOUT_S=${NVST_DEVICE_TIMEOUT_S:-30} NVST_TIMEOUT_S=${NVST_TIMEOUT_S:-90}

# suite NAME NP SETTINGS LIMIT CMD...: a step for NP PEs, sharing GPUs where there are fewer.
suite() {
  local name=$1 np=$2 settings=$3 limit=$4
  shift 4
  [ -n "$ONLY" ] && ! [[ $name =~ $ONLY ]] && return 0
  if [ "$np" -gt "$GPUS" ]; then
    settings="NVST_TEST_SHARE_GPUS=1${settings:+ }${settings#-}"
  fi
  run_step "$name" "${settings:--}" "$limit" "$@"
}

if [ $QUICK -eq 1 ]; then EP=(--stress 200 --ll-stress 50); EP_NODES=(--stress 50 --ll-stress 20)
elif [ "$GPUS" -ge 2 ]; then EP=(--stress 10000 --ll-stress 1000); EP_NODES=(--stress 300 --ll-stress 50)
else EP=(--stress 2000 --ll-stress 200); EP_NODES=(--stress 300 --ll-stress 50); fi
FOUR=$([ $QUICK -eq 0 ] || [ "$GPUS" -ge 4 ] && echo 1 || echo 0)

echo "gpu_check: $GPUS GPU(s) ($(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)); logs in $LOG_DIR"
suite info 1 "" 60 "$B/nvst" info
suite selftest 2 "" 120 "$B/nvst" selftest --np 2

# One node: NVLink (or one GPU shared) between the PEs.
suite device_api 2 "" 300 "$B/nvst_gpu_tests" --np 2
suite device_errors 2 "" 300 "$B/nvst_gpu_tests" --mode errors --np 2
suite failures 2 "" 300 "$B/nvst_failure_tests" --np 2
suite collectives 2 "" 600 "$B/nvst_coll_tests" --np 2
suite ep 2 "" 600 "$B/nvst_ep_tests" --np 2 "${EP[@]}"
# PEs that time-share a GPU hand a ring's worth of items over per turn of
# the time slices (ring_buffer.hpp), so 10^5 operations a PE fit the usual waits.
STRUCT_OPS=$([ $QUICK -eq 1 ] && echo 10000 || echo 100000)
suite structures 2 "" 400 "$B/nvst_structure_tests" --np 2 --ops "$STRUCT_OPS"
[ "$FOUR" = 1 ] && suite structures_4pe 4 "" 500 "$B/nvst_structure_tests" --np 4 --ops "$STRUCT_OPS"
suite lifecycle 2 "" 300 "$B/nvst_lifecycle_tests" --np 2 --soak "$([ $QUICK -eq 1 ] && echo 2000 || echo 20000)"
if [ "$FOUR" = 1 ]; then
  suite device_api_4pe 4 "" 400 "$B/nvst_gpu_tests" --np 4
  suite collectives_4pe 4 "" 600 "$B/nvst_coll_tests" --np 4
  suite ep_4pe 4 "" 600 "$B/nvst_ep_tests" --np 4 --stress 500 --ll-stress 100
fi

# Logical nodes: the proxy and libfabric between nodes of one host.
for prov in shm "tcp;ofi_rxm"; do
  p=${prov%%;*}
  [ $QUICK -eq 1 ] && [ "$p" = tcp ] && continue
  suite "nodes_1x1_${p}_device_api" 2 "NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=$prov" 400 "$B/nvst_gpu_tests" --np 2
  suite "nodes_1x1_${p}_ep" 2 "NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=$prov" 400 "$B/nvst_ep_tests" --np 2 "${EP_NODES[@]}"
  suite "nodes_1x1_${p}_failures" 2 "NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=$prov" 300 "$B/nvst_failure_tests" --np 2
done
if [ $QUICK -eq 0 ]; then
  suite nodes_1x1_shm_collectives 2 "NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=shm" 600 "$B/nvst_coll_tests" --np 2
  suite nodes_2x2_shm_device_api 4 "NVST_NODE_SIZE=2 NVST_FABRIC_PROVIDER=shm" 400 "$B/nvst_gpu_tests" --np 4
  suite nodes_2x2_shm_ep 4 "NVST_NODE_SIZE=2 NVST_FABRIC_PROVIDER=shm" 600 "$B/nvst_ep_tests" --np 4 "${EP_NODES[@]}"
  # Every collective at 2x2 takes over 9 minutes on one shared GPU: the hierarchical forms there.
  if [ "$GPUS" -ge 4 ]; then
    suite nodes_2x2_shm_collectives 4 "NVST_NODE_SIZE=2 NVST_FABRIC_PROVIDER=shm" 600 "$B/nvst_coll_tests" --np 4
  else
    suite nodes_2x2_shm_coll_hier 4 "NVST_NODE_SIZE=2 NVST_FABRIC_PROVIDER=shm" 600 \
      "$B/nvst_coll_tests" --np 4 --only hierarchical
  fi
fi

# The NVSHMEM backend: the same suites with NVSHMEM underneath. NVSHMEM lets
# PEs share a GPU except in its own collectives, which need a GPU per PE.
if [ -x "$B/nvst_gpu_tests_nvshmem" ]; then
  nvst_use_nvshmem_wheel
  suite nvshmem_device_api 2 "NVST_BACKEND=nvshmem" 300 "$B/nvst_gpu_tests_nvshmem" --np 2
  suite nvshmem_lifecycle_1pe 1 "NVST_BACKEND=nvshmem" 300 "$B/nvst_lifecycle_tests_nvshmem" --np 1 \
    --soak "$([ $QUICK -eq 1 ] && echo 2000 || echo 100000)"
  suite nvshmem_collectives_1pe 1 "NVST_BACKEND=nvshmem" 600 "$B/nvst_coll_tests_nvshmem" --np 1
  if [ $QUICK -eq 0 ]; then
    suite nvshmem_lifecycle 2 "NVST_BACKEND=nvshmem" 300 "$B/nvst_lifecycle_tests_nvshmem" --np 2 --soak 10000
    suite nvshmem_ep_1pe 1 "NVST_BACKEND=nvshmem" 600 "$B/nvst_ep_tests_nvshmem" --np 1
    suite nvshmem_ep 2 "NVST_BACKEND=nvshmem" 600 "$B/nvst_ep_tests_nvshmem" --np 2 "${EP[@]}"
    suite nvshmem_collectives 2 "NVST_BACKEND=nvshmem" 600 "$B/nvst_coll_tests_nvshmem" --np 2
  fi
fi

# Python and PyTorch: the pytest suite, then the job at 2 ranks on one node
# and across 1+1 logical nodes (sharing the GPU where there is one).
if python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
  PY_DIR=$(cd "$BUILD_DIR/python" && pwd)
  export PYTHONPATH="$PY_DIR${PYTHONPATH:+:$PYTHONPATH}"
  nvst_use_nvshmem_wheel
  # The module for this machine's Python (the build may come from another).
  suite python_module 1 "" 300 bash scripts/build_python_module.sh "$BUILD_DIR" python3
  suite python_pytest 1 "" 900 python3 -m pytest -q -p no:cacheprovider tests/python
  if [ -n "$PEERS" ]; then
    [ -d "$PEERS/seed/tests" ] && suite peer_seed_tma_copy 1 "" 120 python3 "$PEERS/seed/tests/test_tma_copy.py"
    if [ -d "$PEERS/deepep/tests" ]; then
      # DeepEP's tests import their own utils and `deep_ep` from the parent folder.
      DEEPEP=(env -u NVST_SYMMETRIC_SIZE PYTHONPATH="$PEERS/deepep:$PY_DIR" python3)
      pushd "$PEERS/deepep/tests" > /dev/null
      suite peer_deepep_intranode 1 "" 900 "${DEEPEP[@]}" test_intranode.py --num-processes 1
      suite peer_deepep_low_latency 1 "" 600 "${DEEPEP[@]}" test_low_latency.py --num-processes 1
      popd > /dev/null
    fi
  fi
  if [ -f tests/python/torch_job.py ]; then
    TR=(python3 -m torch.distributed.run --standalone --nproc_per_node=2 tests/python/torch_job.py)
    [ "$GPUS" -lt 2 ] && suite python_torch_job 2 "" 600 "${TR[@]}"
    suite python_nodes_1x1_shm 2 "NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=shm" 600 "${TR[@]}"
    [ -x "$B/nvst_gpu_tests_nvshmem" ] && [ $QUICK -eq 0 ] &&
      suite python_nvshmem 2 "NVST_BACKEND=nvshmem" 600 "${TR[@]}"
  fi
else
  echo "gpu_check: PyTorch with CUDA does not import here: Python suites left out"
fi

# compute-sanitizer: memory errors and shared-memory races. NVST_TEST_SANITIZER
# leaves out the one case that breaks CUDA's rules on purpose.
if [ $SAN -eq 1 ]; then
  CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  if [ -x "$CS" ]; then
    S=("$CS" --target-processes all --error-exitcode 9 --print-limit 20)
    suite memcheck_device_api 2 "NVST_TEST_SANITIZER=1" 600 "${S[@]}" --tool memcheck "$B/nvst_gpu_tests" --np 2 --rounds 1
    suite memcheck_collectives 2 "NVST_TEST_SANITIZER=1" 600 "${S[@]}" --tool memcheck "$B/nvst_coll_tests" --np 2
    suite memcheck_ep 2 "NVST_TEST_SANITIZER=1" 600 "${S[@]}" --tool memcheck "$B/nvst_ep_tests" --np 2 --stress 20
    suite racecheck_ep 2 "NVST_TEST_SANITIZER=1" 600 "${S[@]}" --tool racecheck "$B/nvst_ep_tests" --np 2 --stress 5
    suite memcheck_nodes_1x1_shm 2 "NVST_TEST_SANITIZER=1 NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=shm" 600 \
      "${S[@]}" --tool memcheck "$B/nvst_gpu_tests" --np 2 --rounds 1
  else
    echo "gpu_check: compute-sanitizer not found: sanitizer suites left out"
  fi
fi

print_summary
