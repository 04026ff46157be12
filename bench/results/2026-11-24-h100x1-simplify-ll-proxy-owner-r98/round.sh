export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT
OUT=$R/ep bash scripts/device_round.sh build/bin shared-ep-hier >/dev/null 2>&1; cat $R/ep/summary.txt
mkdir -p $R/more
( export NVST_TEST_SHARE_GPUS=1 NVST_DEVICE_TIMEOUT_S=20 NVST_TIMEOUT_S=60
  s() { local name=$1 t=$2; shift 2; local t0=$SECONDS; timeout -k 5 $t "$@" > $R/more/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'passed|failed' $R/more/$name.log | tail -1)" | tee -a $R/more/summary.txt; }
  s coll_2pe 150 build/bin/nvst_coll_tests --np 2
  s gpu_api_2pe 150 build/bin/nvst_gpu_tests --np 2
  NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=shm s gpu_internode_shm 120 build/bin/nvst_gpu_tests --np 2 )
