#!/usr/bin/env bash
# What every open issue's "done when" asks of nvidia-h200-x4, in four calls
# of the device tool (each under its 600 s limit; the session's 1800 s of
# device time is spent in full on a machine of several GPUs, so run them in
# order and stop to look after each):
#   1  issues 2, 3, 4: device API at 2 and 4 PEs, sanitizers, bench p2p
#      (ours, CUDA IPC, NCCL, NVSHMEM), the proxy path (fifo, p2p across
#      nodes), the device API and the collectives as 2x2 logical nodes
#   2  issue 4: collectives at 2 and 4 PEs, bench coll (NCCL and NVSHMEM
#      columns, eager and graphs), auto against oneshot for ll
#   3  issue 5: EP at 2 and 4 PEs and 2x2, sanitizers, bench ep at one node
#      of 4 and at 2x2
#   4  issues 6, 8: the Python package under torchrun at 2 and 4, the NVSHMEM
#      backend's suites
# Usage, from the device tool (build here first, then carry):
#   parts 1-3: mkdir -p var/bin && cp build/bin/{nvst,nvst_gpu_tests,nvst_coll_tests,nvst_ep_tests,
#              libnvst_nvshmem_baseline.so} var/bin/ && git rev-parse --short HEAD > var/COMMIT
#              (var/ in .git/info/exclude; carry ["var"], about 36 MB)
#   part 4:    BIN=build/bin; carry the *_nvshmem test binaries, build/bin/nvst_gpu_tests, and what
#              scripts/build_python_module.sh reads (build/src/libnvst*.a,
#              build/CMakeFiles/nvst_python.dir/cmake_device_link.o, build/python); if that passes the
#              64 MiB carry limit, run the torch and nvshmem modes in two calls
#   bash scripts/x4_round.sh PART [BIN]      BIN defaults to var/bin
# Logs land in $OUT/partPART/<mode>/ (logs.tgz and JSON), one summary.
set -uo pipefail
PART=${1:?part 1-4}
BIN=${2:-var/bin}
OUT=${OUT:-$PWD/device-out}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
root="$OUT/part$PART"; mkdir -p "$root"
run_mode() {  # run_mode MODE [VAR=value ...]: one device_round.sh mode into its own folder
  local mode=$1; shift
  env "$@" OUT="$root/$mode" bash scripts/device_round.sh "$BIN" "$mode" > "$root/$mode.out" 2>&1
  sed -n '/^--- summary/,$p' "$root/$mode.out" | head -60 >> "$root/summary.txt"
}
echo "part $PART commit $(cat "$BIN/../COMMIT" 2>/dev/null) $(nvidia-smi -L | wc -l) GPUs" > "$root/summary.txt"
case "$PART" in
  1) run_mode full
     run_mode nodes-api ;;
  2) run_mode coll
     # ll (one node, up to 64 KiB a part) against the push kernels it replaced, small sizes, graphs
     mkdir -p "$root/ll"
     for algo in auto oneshot; do
       NVST_COLL_ALGO=$algo timeout 200 "$BIN/nvst" bench coll -b 1K -e 1M -f 2 --json "$root/ll/coll_$algo.json" \
         > "$root/ll/coll_$algo.log" 2>&1
       echo "ll calibration $algo rc=$?" >> "$root/summary.txt"
     done
     (cd "$root/ll" && tar czf logs.tgz ./*.log && rm -f ./*.log) ;;
  3) run_mode ep
     run_mode nodes-ep ;;
  4) run_mode torch
     run_mode nvshmem ;;
  *) echo "part must be 1-4" >&2; exit 2 ;;
esac
cat "$root/summary.txt"
