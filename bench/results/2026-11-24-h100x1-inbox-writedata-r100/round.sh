#!/usr/bin/env bash
# r100: the inbox doorbell carried by the piece's write (fi_writedata), against
# the old two-operation doorbell, and with 1 MiB pieces; host heaps through the
# inbox (no GPU in the path) and GPU heaps (bench p2p's host-initiated row);
# then the fabric host tests on this machine's cores.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NVST_NODE_SIZE=1 NVST_TEST_SHARE_GPUS=1
OUT=${OUT:-/tmp/out}; L=$OUT/logs; mkdir -p $L
nvidia-smi -L > $L/smi.txt; cp var/COMMIT $L/commit.txt; nproc > $L/nproc.txt
for prov in shm "tcp;ofi_rxm"; do
  p=${prov%%;*}
  for v in old bell bell_p1m; do
    NVST_PROXY_INBOX=1 NVST_FABRIC_PROVIDER="$prov" timeout 120 var/nvst_$v bench host --np 2 -b 4K -e 64M -f 4 -n 20 --samples 5 \
      --json $L/host_${v}_$p.json > $L/host_${v}_$p.log 2>&1; echo "== host inbox $v $prov rc=$?"
    grep -A12 "op: fabric_put" $L/host_${v}_$p.log | tail -n 9
    NVST_FABRIC_PROVIDER="$prov" timeout 150 var/nvst_$v bench p2p --np 2 -b 4K -e 64M -f 4 -n 20 -w 5 --samples 5 \
      --json $L/gpu_${v}_$p.json > $L/gpu_${v}_$p.log 2>&1; echo "== gpu $v $prov rc=$?"
    grep -A12 "op: put" $L/gpu_${v}_$p.log | tail -n 9
  done
done
NVST_PROXY_INBOX=0 NVST_FABRIC_PROVIDER="tcp;ofi_rxm" timeout 120 var/nvst_bell bench host --np 2 -b 4K -e 64M -f 4 -n 20 --samples 5 \
  --json $L/host_direct_tcp.json > $L/host_direct_tcp.log 2>&1; echo "== host direct tcp rc=$?"
grep -A12 "op: fabric_put" $L/host_direct_tcp.log | tail -n 9
timeout 200 build/tests/host/nvst_host_tests --gtest_filter='Paths/Fabric.*:FabricSetup.*:InboxBell.*:ProxyFifo.*' > $L/host_tests.log 2>&1; echo "== fabric host tests rc=$?"
tail -n 4 $L/host_tests.log
tar czf $OUT/r100.tgz -C $OUT logs && rm -rf $L
