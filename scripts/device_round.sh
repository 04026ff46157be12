#!/usr/bin/env bash
# One round on a lent GPU machine: everything the GPU side of the issues
# asks for, logs and JSON under $OUT (or ./device-out), a short summary last.
# Usage: bash scripts/device_round.sh BIN_DIR [quick|full]
set -uo pipefail
BIN=${1:?bin dir with nvst and nvst_gpu_tests}
MODE=${2:-full}
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NVST_DEVICE_TIMEOUT_S=${NVST_DEVICE_TIMEOUT_S:-30} NVST_TIMEOUT_S=${NVST_TIMEOUT_S:-120}
summary="$OUT/summary.txt"; : > "$summary"
step() {  # step NAME TIMEOUT CMD...: runs, logs, records rc
  local name=$1 t=$2; shift 2
  local t0=$SECONDS
  timeout "$t" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  printf '%-28s rc=%-3d %4ds  %s\n' "$name" "$rc" $((SECONDS - t0)) "$(grep -E 'passed|failed|PASS|FAIL' "$OUT/$name.log" | tail -1)" | tee -a "$summary"
}
nvidia-smi topo -m > "$OUT/topo.log" 2>&1
step info 60 "$BIN/nvst" info
step selftest 120 "$BIN/nvst" selftest
step gpu_api_2pe 300 "$BIN/nvst_gpu_tests" --np 2
step gpu_api_4pe 300 "$BIN/nvst_gpu_tests" --np 4
step gpu_errors 300 "$BIN/nvst_gpu_tests" --mode errors --np 2
if [ "$MODE" = full ]; then
  step memcheck_2pe 400 compute-sanitizer --tool memcheck --target-processes all --error-exitcode 9 "$BIN/nvst_gpu_tests" --np 2 --rounds 1
  step racecheck_2pe 400 compute-sanitizer --tool racecheck --target-processes all --error-exitcode 9 "$BIN/nvst_gpu_tests" --np 2 --rounds 1
fi
NVST_BENCH_SWEEP=${NVST_BENCH_SWEEP:-0} step bench_p2p 500 "$BIN/nvst" bench p2p -b 4K -e 1G -f 2 --json "$OUT/p2p.json"
echo "--- summary"; cat "$summary"
echo "--- p2p table"; sed -n '/^#/,$p' "$OUT/bench_p2p.log" | tail -70
