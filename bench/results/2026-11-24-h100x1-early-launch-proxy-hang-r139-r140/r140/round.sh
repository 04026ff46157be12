# r140 (1x H100, PEs sharing it): kernels that wait on the proxy (across nodes) no longer let the next kernel launch early; the suites that hung in r139
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NVST_DEVICE_TIMEOUT_S=20 NVST_TIMEOUT_S=60 NVST_TEST_SHARE_GPUS=1
R=$OUT/r140; mkdir -p $R; echo "commit $(cat var/COMMIT)" > $R/summary.txt
s() { local name=$1 t=$2; shift 2; local t0=$SECONDS; timeout -k 5 $t "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'passed|failed' $R/$name.log | tail -1)" >> $R/summary.txt; }
NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=shm s coll_internode_2pe 300 var/bin/nvst_coll_tests --np 2
NVST_NODE_SIZE=2 s ep_2x2 150 var/bin/nvst_ep_tests --np 4 --stress 50 --ll-stress 200
grep -h "FAIL\|device error" $R/*.log | head -5 >> $R/summary.txt
(cd $R && tar czf ../r140.tgz ./*.log && rm -f ./*.log)
cat $R/summary.txt
