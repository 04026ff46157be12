#!/usr/bin/env bash
# Usage: check_tma_sass.sh CUOBJDUMP OBJECT
# Passes when the tma_copy kernel's sm_90 machine code issues bulk copies
# (UBLKCP, what cp.async.bulk compiles to) and waits on an mbarrier (SYNCS).
set -euo pipefail
cuobjdump=$1 obj=$2
[[ -x $cuobjdump ]] || { echo "check_tma_sass: cuobjdump not found ($cuobjdump)"; exit 1; }
sass=$("$cuobjdump" -sass "$obj")
kernel=$(grep -c "Function : .*tma_copy_kernel" <<<"$sass" || true)
bulk=$(grep -c "UBLKCP" <<<"$sass" || true)
echo "tma_copy_kernel: $kernel function(s), $bulk UBLKCP instruction(s)"
[[ $kernel -ge 1 ]] || { echo "FAIL: no tma_copy_kernel in $obj"; exit 1; }
[[ $bulk -ge 2 ]] || { echo "FAIL: tma_copy_kernel issues no bulk copies (want UBLKCP for load and store)"; exit 1; }
grep -q "SYNCS" <<<"$sass" || { echo "FAIL: no mbarrier wait (SYNCS) in tma_copy_kernel"; exit 1; }
echo PASS
