# r121 (1x H100): where a first (uncached) dispatch's time goes, one PE; old = before the layout's masks came from a keeping pool
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NVST_DEVICE_TIMEOUT_S=20 NVST_TIMEOUT_S=60
R=$OUT/r121; mkdir -p $R; echo "commit $(cat var/COMMIT)" > $R/summary.txt
one() { RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$1 timeout 120 "${@:2}"; }
for i in 1 2; do
  echo "old, run $i" >> $R/summary.txt; one 29511 var/bin/first_dispatch_old >> $R/summary.txt 2>&1
  echo "new, run $i" >> $R/summary.txt; one 29512 var/bin/first_dispatch_new >> $R/summary.txt 2>&1
done
NVST_TEST_SHARE_GPUS=1 timeout 150 var/bin/nvst_ep_tests --np 2 --stress 200 --ll-stress 20 > $R/ep_2pe.log 2>&1; echo "ep_2pe rc=$? $(grep -E 'passed|failed' $R/ep_2pe.log | tail -1)" >> $R/summary.txt
cd $R && tar czf ../r121.tgz ./*.log && rm -f ./*.log
