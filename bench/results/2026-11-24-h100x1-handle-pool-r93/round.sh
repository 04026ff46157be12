export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT
mkdir -p $R/old
( export NVST_TEST_SHARE_GPUS=1 NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=shm NVST_DEVICE_TIMEOUT_S=20 NVST_TIMEOUT_S=40
  timeout -k 5 100 build/bin/nvst_ep_tests_old --np 2 --stress 0 --ll-stress 0 > $R/old/ep_1x1_old.log 2>&1; echo "old rc=$?" ) | tee $R/old/summary.txt
grep -E "layers|FAIL|timeout|stuck" $R/old/ep_1x1_old.log | head -8
OUT=$R/hier bash scripts/device_round.sh build/bin shared-ep-hier >/dev/null 2>&1; cat $R/hier/summary.txt
mkdir -p $R/bench
( export NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=shm NVST_DEVICE_TIMEOUT_S=30
  for r in 0 1; do RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29555 timeout -k 5 200 build/bin/nvst bench ep --json $R/bench/ep_1x1.json > $R/bench/ep_1x1_pe$r.log 2>&1 & done; wait; echo "bench rc done" )
tail -30 $R/bench/ep_1x1_pe0.log
