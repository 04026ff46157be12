# r124 (1x H100): the layout's masks from a HandlePool (the review's mend of r121's own pool code)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NVST_DEVICE_TIMEOUT_S=20 NVST_TIMEOUT_S=60
R=$OUT/r124; mkdir -p $R; echo "commit $(cat var/COMMIT)" > $R/summary.txt
RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29531 timeout 120 var/bin/first_dispatch_pool >> $R/summary.txt 2>&1
NVST_TEST_SHARE_GPUS=1 timeout 200 var/bin/nvst_ep_tests --np 2 --stress 300 --ll-stress 100 > $R/ep_2pe.log 2>&1; echo "ep_2pe rc=$? $(grep -E 'passed|failed' $R/ep_2pe.log | tail -1)" >> $R/summary.txt
cd $R && tar czf ../r124.tgz ./*.log && rm -f ./*.log
