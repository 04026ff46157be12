export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT; mkdir -p $R/coll
lib=$(python3 -c "import nvidia,os;print(os.path.join(list(nvidia.__path__)[0],'nvshmem','lib'))")
( export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" NVST_TEST_SHARE_GPUS=1 NVST_DEVICE_TIMEOUT_S=20
  t0=$SECONDS; NVST_BACKEND=nvshmem timeout -k 5 200 build/bin/nvst_coll_tests_nvshmem --np 2 > $R/coll/coll_nvshmem_2pe_shared.log 2>&1
  echo "coll_nvshmem_2pe_shared rc=$? $((SECONDS-t0))s $(grep -E 'passed|failed' $R/coll/coll_nvshmem_2pe_shared.log | tail -1)" | tee $R/coll/summary.txt )
grep -c " ll" $R/coll/coll_nvshmem_2pe_shared.log; grep FAIL $R/coll/coll_nvshmem_2pe_shared.log | head -5
OUT=$R/torch timeout 380 bash scripts/device_round.sh build/bin shared-torch-nvshmem >/dev/null 2>&1; cat $R/torch/summary.txt
