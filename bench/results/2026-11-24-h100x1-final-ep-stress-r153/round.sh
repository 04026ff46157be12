# r153 (1x H100, PEs time-sharing it): the final state's EP suite with its full stress (10^4 random
# normal-mode routings, each a first dispatch through the GPU count exchange, and 1000 low-latency) at
# 2 PEs, and 2x2 logical nodes with 1000 and 200
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NVST_DEVICE_TIMEOUT_S=20 NVST_TIMEOUT_S=60 NVST_TEST_SHARE_GPUS=1 NVST_FABRIC_PROVIDER=shm
R=$OUT/r153; mkdir -p $R; echo "commit $(cat var/COMMIT)" > $R/summary.txt
s() { local name=$1 t=$2; shift 2; local t0=$SECONDS; timeout -k 5 $t "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'passed|failed' $R/$name.log | tail -1)" >> $R/summary.txt; }
s ep_2pe_full 330 var/bin/nvst_ep_tests --np 2
NVST_NODE_SIZE=2 s ep_2x2 200 var/bin/nvst_ep_tests --np 4 --stress 1000 --ll-stress 200
grep -h "FAIL\|stress 10000" $R/*.log | head >> $R/summary.txt
(cd $R && tar czf r153.tgz ./*.log && rm -f ./*.log)
cat $R/summary.txt
