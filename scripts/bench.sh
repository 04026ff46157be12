#!/usr/bin/env bash
# The benchmark command. Builds if needed, then:
#   bash scripts/bench.sh             runs `nvst bench` on whatever hardware is present
#   bash scripts/bench.sh FLAGS...    the same with nvst bench's flags (e.g. coll -b 4K -e 1G)
#   bash scripts/bench.sh --json      runs the full suite this machine allows and writes it
#                                     into bench/baselines/<gpu>-x<N>.json (the one writer of
#                                     a baseline), then re-renders README, docs and plots
# The full suite: p2p, collectives (and the oneshot calibration), EP on
# NVSHMEM's heap where built, puts across two logical nodes over shm and tcp,
# and the PyTorch tables where PyTorch is, with 2+ GPUs; the EP Buffer (at one
# PE on one GPU), the GPU -> proxy FIFO and the decision guide's measurement
# with 1+; the host-memory benchmarks everywhere.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
if [ ! -x "$BUILD_DIR/bin/nvst" ]; then
  bash scripts/install_deps.sh && bash scripts/build.sh || exit 1
fi
if [ "${1:-}" != "--json" ] || [ $# -gt 1 ]; then
  exec "$BUILD_DIR/bin/nvst" bench "$@"
fi

SHAPE=$(python3 scripts/baseline.py shape) || exit 1
BASELINE="bench/baselines/$SHAPE.json"
GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
LOG_DIR=$(mktemp -d "${TMPDIR:-/tmp}/nvst-bench.XXXXXX")
source scripts/steps.sh
DRIVER=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)
# NVST_COMMIT names the commit where the tree is a copy without its history.
COMMIT=${NVST_COMMIT:-$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)}
[ -z "${NVST_COMMIT:-}" ] && [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] && COMMIT="$COMMIT-dirty"
B="$BUILD_DIR/bin"
VERSIONS=()  # recorded beside what each benchmark's JSON names itself
[ -n "$DRIVER" ] && VERSIONS+=("driver=$DRIVER")
echo "# bench.sh --json: $GPUS GPU(s), writing $BASELINE; logs in $LOG_DIR"

# bench NAME SETTINGS LIMIT CMD...: one benchmark into $LOG_DIR/NAME.json, then into the baseline.
bench() {
  local name=$1 settings=$2 limit=$3
  shift 3
  local out="$LOG_DIR/$name.json"
  run_step "$name" "$settings" "$limit" "$@" --json "$out"
  [ -f "$out" ] || return 0
  local -a envs=() extra=()
  [ "$settings" != "-" ] && read -r -a envs <<< "$settings"
  local e
  for e in ${envs[@]+"${envs[@]}"}; do extra+=(--env "$e"); done
  for e in ${VERSIONS[@]+"${VERSIONS[@]}"}; do extra+=(--version "$e"); done
  local cmd="$*"
  cmd=${cmd#"$B/"}
  python3 scripts/baseline.py add "$BASELINE" "$name" "$out" --command "$cmd" --commit "$COMMIT" \
    ${extra[@]+"${extra[@]}"} || STEP_FAILED=1
}

if [ "$GPUS" -ge 2 ]; then
  bench p2p - 900 "$B/nvst" bench p2p
  bench coll - 900 "$B/nvst" bench coll -b 1K -e 256M -f 4
  bench coll_oneshot "NVST_COLL_ALGO=oneshot" 600 "$B/nvst" bench coll -b 1K -e 1M -f 4
  if [ -x "$B/nvst_nvshmem" ]; then
    nvst_use_nvshmem_wheel
    bench ep_nvshmem - 600 "$B/nvst_nvshmem" bench ep
  fi
  bench p2p_nodes_shm "NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=shm" 600 "$B/nvst" bench p2p -b 4K -e 64M -f 4
  bench p2p_nodes_tcp "NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=tcp;ofi_rxm" 600 "$B/nvst" bench p2p -b 4K -e 64M -f 4
  if python3 -c "import torch, sys; sys.exit(torch.cuda.device_count() < 2)" 2>/dev/null; then
    NV4PY=$(python3 -c "import importlib.metadata as m; print(m.version('nvshmem4py-cu13'))" 2>/dev/null) &&
      VERSIONS+=("nvshmem4py=$NV4PY")
    export PYTHONPATH="$BUILD_DIR/python${PYTHONPATH:+:$PYTHONPATH}"
    bench torch - 900 python3 -m torch.distributed.run --standalone --nproc_per_node=2 -m nvshmem_tutorial.bench
  fi
fi
# The decision guide's measurement, a rank per GPU (one GPU: one rank, p2p
# skipped): section `guide`, what `python -m nvshmem_tutorial.guide --analyze`
# reads first.
if [ "$GPUS" -ge 1 ] && python3 -c "import torch" 2>/dev/null; then
  export PYTHONPATH="$BUILD_DIR/python${PYTHONPATH:+:$PYTHONPATH}"
  bench guide - 900 python3 -m torch.distributed.run --standalone --nproc_per_node="$GPUS" \
    -m nvshmem_tutorial.guide --benchmark
fi
# The EP Buffer at every GPU count (one GPU: one PE, the whole path without a wire).
[ "$GPUS" -ge 1 ] && bench ep - 600 "$B/nvst" bench ep
[ "$GPUS" -ge 1 ] && bench fifo - 300 "$B/nvst" bench fifo
bench host - 600 "$B/nvst" bench host

if [ -f "$BASELINE" ]; then
  plots=""
  python3 -c "import matplotlib" 2>/dev/null || plots="--no-plots"
  python3 scripts/render_results.py $plots || STEP_FAILED=1
fi
print_summary
