export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT
OUT=$R/hier bash scripts/device_round.sh build/bin shared-coll-hier >/dev/null 2>&1; cat $R/hier/summary.txt
OUT=$R/coll timeout 380 bash scripts/device_round.sh build/bin shared-coll >/dev/null 2>&1; cat $R/coll/summary.txt
grep -h FAIL $R/*/*.log | head
