# r133 (1x H100): low-latency combine receive at two blocks an SM (64 registers, slots 4 a batch) against r132
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NVST_DEVICE_TIMEOUT_S=20 NVST_TIMEOUT_S=60
R=$OUT/r133; mkdir -p $R; echo "commit $(cat var/COMMIT)" > $R/summary.txt
one() { RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$1 timeout 120 "${@:2}"; }
for i in 1 2 3; do
  echo "r132, run $i" >> $R/summary.txt; one 29521 var/bin/ll_phases_r132 2>&1 | grep combine >> $R/summary.txt
  echo "occ2, run $i" >> $R/summary.txt; one 29522 var/bin/ll_phases_occ2 2>&1 | grep combine >> $R/summary.txt
done
cat $R/summary.txt
