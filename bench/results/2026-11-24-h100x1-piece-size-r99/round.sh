#!/usr/bin/env bash
# r99: bench p2p across logical nodes on one GPU, with the host-initiated row;
# three piece sizes (64 KiB, 256 KiB = main, 1 MiB), shm then tcp.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NVST_NODE_SIZE=1 NVST_TEST_SHARE_GPUS=1 NVST_PROXY_DEBUG=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi -L > $OUT/smi.txt
cat build/COMMIT > $OUT/commit.txt
for prov in shm "tcp;ofi_rxm"; do
  p=${prov%%;*}
  for v in base p64k p1m; do
    echo "== $v $prov" 
    NVST_FABRIC_PROVIDER="$prov" timeout 150 var/nvst_$v bench p2p --np 2 -b 4K -e 64M -f 4 -n 20 -w 5 --samples 5 \
      --json $OUT/${v}_$p.json > $OUT/${v}_$p.log 2>&1; echo "rc=$?"
    grep -v "proxy:" $OUT/${v}_$p.log | tail -n 12
  done
done
