# r139 (1x H100, PEs sharing it): the final state through the suites the launch change touches: collectives across logical nodes (proxy), the device API, and the Python package on both backends
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NVST_DEVICE_TIMEOUT_S=20 NVST_TIMEOUT_S=60
R=$OUT/r139; mkdir -p $R; echo "commit $(cat var/COMMIT)" > $R/summary.txt
s() { local name=$1 t=$2; shift 2; local t0=$SECONDS; timeout -k 5 $t "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'passed|failed' $R/$name.log | tail -1)" >> $R/summary.txt; }
( export NVST_TEST_SHARE_GPUS=1
  NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=shm s coll_internode_2pe 200 var/bin/nvst_coll_tests --np 2
  s gpu_api_2pe 150 var/bin/nvst_gpu_tests --np 2 )
grep -h "FAIL" $R/*.log | head >> $R/summary.txt
(cd $R && tar czf ../r139.tgz ./*.log && rm -f ./*.log)
OUT=$OUT/r139torch timeout 200 bash scripts/device_round.sh var/pybuild/bin shared-torch-nvshmem >/dev/null 2>&1; echo "torch rc=$?" >> $R/summary.txt; cat $OUT/r139torch/summary.txt >> $R/summary.txt 2>/dev/null
cat $R/summary.txt
