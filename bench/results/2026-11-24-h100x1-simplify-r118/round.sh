# r118 (1x H100): after the simplification (one stage_piece, release_blocked, gpu_of)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NVST_DEVICE_TIMEOUT_S=20 NVST_TIMEOUT_S=60 NVST_TEST_SHARE_GPUS=1
R=$OUT/r118; mkdir -p $R; echo "commit $(cat var/COMMIT)" > $R/summary.txt
s() { local name=$1 t=$2; shift 2; local t0=$SECONDS; timeout -k 5 $t "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'passed|failed|not run' $R/$name.log | tail -1 | cut -c1-200)" >> $R/summary.txt; }
for prov in "tcp;ofi_rxm" shm; do p=${prov%%;*}
  NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=$prov s gpu_internode_$p 200 var/bin/nvst_gpu_tests --np 2
done
NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=shm s p2p_shm 120 var/bin/nvst bench p2p --np 2 -b 64K -e 4M -f 4
NVST_NODE_SIZE=2 NVST_FABRIC_PROVIDER=shm s ep_2x2 200 var/bin/nvst_ep_tests --np 4 --stress 200 --ll-stress 50
grep -A6 "op: put" $R/p2p_shm.log >> $R/summary.txt
cd $R && tar czf ../r118.tgz ./*.log && rm -f ./*.log
