# r147 (1x H100, PEs time-sharing it): the EP suite across logical nodes on 4f9ebe3 (the layout's
# finish_kernel also scans node_pos there): 1+1 and 2x2, shm, shorter stress
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NVST_TEST_SHARE_GPUS=1 NVST_FABRIC_PROVIDER=shm
R=$OUT/r147; mkdir -p $R; echo "commit $(cat var/COMMIT)" > $R/summary.txt
( time NVST_NODE_SIZE=1 timeout 220 var/bin/nvst_ep_tests --np 2 --stress 300 --ll-stress 50 ) > $R/ep_1x1.log 2>&1; echo "ep 1+1 rc=$?" >> $R/summary.txt
grep -E "FAIL|passed|real" $R/ep_1x1.log | tail -4 >> $R/summary.txt
( time NVST_NODE_SIZE=2 timeout 260 var/bin/nvst_ep_tests --np 4 --stress 100 --ll-stress 20 ) > $R/ep_2x2.log 2>&1; echo "ep 2x2 rc=$?" >> $R/summary.txt
grep -E "FAIL|passed|real" $R/ep_2x2.log | tail -4 >> $R/summary.txt
cat $R/summary.txt
