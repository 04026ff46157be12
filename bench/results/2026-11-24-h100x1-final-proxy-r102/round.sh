#!/usr/bin/env bash
# r102: the final proxy of the session (writedata doorbell, CQ sizing, the
# completion without a context) under the GPU suites across logical nodes,
# and bench p2p across nodes over shm and tcp.
OUT0=${OUT:-/tmp/out}
OUT=$OUT0/proxy bash scripts/device_round.sh var/bin shared-proxy 2>&1 | grep -A8 "^--- summary"
EP_STRESS=200 OUT=$OUT0/ep bash scripts/device_round.sh var/bin shared-ep-hier 2>&1 | grep -A8 "^--- summary"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVST_NODE_SIZE=1 NVST_TEST_SHARE_GPUS=1
mkdir -p $OUT0/p2p
for prov in shm "tcp;ofi_rxm"; do
  p=${prov%%;*}
  NVST_FABRIC_PROVIDER="$prov" timeout 150 var/bin/nvst bench p2p --np 2 -b 4K -e 64M -f 4 -n 20 -w 5 --samples 5 \
    --json $OUT0/p2p/p2p_$p.json > $OUT0/p2p/p2p_$p.log 2>&1; echo "== p2p $prov rc=$?"
  grep -A12 "op: put" $OUT0/p2p/p2p_$p.log | tail -n 11
done
