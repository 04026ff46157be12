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
#   x2 on a machine of 2 GPUs (nvidia-h200-x2), what one GPU could not time:
#      ll against oneshot at small sizes, bench ep across 1+1 logical nodes
#      (LogFMT), and kernel-issued puts across nodes with their traced
#      timeline (NVST_PROXY_TRACE, scripts/proxy_trace.py --from kernel)
# Usage, from the device tool (build here first, then carry):
#   parts 1-3: mkdir -p var/bin && cp build/bin/{nvst,nvst_gpu_tests,nvst_coll_tests,nvst_ep_tests,
#              libnvst_nvshmem_baseline.so} var/bin/ && git rev-parse --short HEAD > var/COMMIT
#              (var/ in .git/info/exclude; carry ["var"], about 36 MB)
#   part 4:    BIN=build/bin; carry the *_nvshmem test binaries, build/bin/nvst_gpu_tests, and what
#              scripts/build_python_module.sh reads (build/src/libnvst*.a,
#              build/CMakeFiles/nvst_python.dir/cmake_device_link.o, build/python); if that passes the
#              64 MiB carry limit, run the torch and nvshmem modes in two calls; for the Python
#              bench's NVSHMEM column put the nvshmem4py-cu13 wheel for Python 3.12 in BIN/../wheels312
#              (pip download --no-deps --only-binary=:all: --python-version 3.12 nvshmem4py-cu13)
#   bash scripts/x4_round.sh PART [BIN]      BIN defaults to var/bin
# Logs land in $OUT/partPART/<mode>/ (logs.tgz and JSON), one summary.
set -uo pipefail
PART=${1:?part 1-4 or x2}
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
  x2) t() { local name=$1 lim=$2; shift 2; timeout "$lim" "$@" > "$root/$name.log" 2>&1
            echo "$name rc=$? $(grep -E 'passed|failed' "$root/$name.log" | tail -1)" >> "$root/summary.txt"; }
     t coll_2pe 240 "$BIN/nvst_coll_tests" --np 2
     for algo in auto oneshot; do
       NVST_COLL_ALGO=$algo t bench_coll_$algo 150 "$BIN/nvst" bench coll -b 1K -e 1M -f 2 --json "$root/coll_$algo.json"
     done
     for prov in shm "tcp;ofi_rxm"; do p=${prov%%;*}
       NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=$prov t ep_1x1_$p 200 "$BIN/nvst_ep_tests" --np 2 --stress 300 --ll-stress 50
       NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=$prov t bench_ep_1x1_$p 150 "$BIN/nvst" bench ep --json "$root/ep_1x1_$p.json"
       NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=$prov NVST_PROXY_TRACE="$root/tr_$p" t bench_p2p_1x1_$p 200 \
         "$BIN/nvst" bench p2p -b 4K -e 64M -f 4 --json "$root/p2p_1x1_$p.json"
       for sz in 1048576 16777216; do
         python3 scripts/proxy_trace.py "$root/tr_$p" --from kernel --bytes $sz >> "$root/summary.txt" 2>&1
       done
       rm -f "$root"/tr_$p.*
     done
     (cd "$root" && tar czf logs.tgz ./*.log && rm -f ./*.log) ;;
  *) echo "part must be 1-4 or x2" >&2; exit 2 ;;
esac
cat "$root/summary.txt"
