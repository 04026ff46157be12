# r117 (1x H100): the final proxy (review mends) across logical nodes: device API, EP 2x2, host heaps
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NVST_DEVICE_TIMEOUT_S=20 NVST_TIMEOUT_S=60 NVST_TEST_SHARE_GPUS=1
R=$OUT/r117; mkdir -p $R; echo "commit $(cat var/COMMIT)" > $R/summary.txt
s() { local name=$1 t=$2; shift 2; local t0=$SECONDS; timeout -k 5 $t "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'passed|failed' $R/$name.log | tail -1 | cut -c1-200)" >> $R/summary.txt; }
for prov in "tcp;ofi_rxm" shm; do p=${prov%%;*}
  NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=$prov s gpu_internode_$p 200 var/bin/nvst_gpu_tests --np 2
  NVST_FABRIC_PROVIDER=$prov s host_$p 150 var/bin/nvst bench host --np 2 -b 4K -e 16M -f 4
  grep -A8 "op: fabric_put" $R/host_$p.log | grep -E "^ +[0-9]" >> $R/summary.txt; grep -A2 "op: signal_pingpong" $R/host_$p.log | tail -1 >> $R/summary.txt
done
NVST_NODE_SIZE=2 NVST_FABRIC_PROVIDER=shm s ep_2x2 200 var/bin/nvst_ep_tests --np 4 --stress 200 --ll-stress 50
NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=shm s gpu_internode_shm_3pe 200 var/bin/nvst_gpu_tests --np 3
cd $R && tar czf ../r117.tgz ./*.log && rm -f ./*.log
