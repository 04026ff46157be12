# r152 (1x H100): the Python package on 6455f74 (the GPU count exchange): torch_job.py on both backends,
# 1 rank, 2 sharing the GPU, and 1+1 logical nodes (device_round.sh shared-torch-nvshmem)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/r152; mkdir -p $R; echo "commit $(cat var/COMMIT)" > $R/summary.txt
OUT=$OUT/r152torch timeout 500 bash scripts/device_round.sh var/pybuild/bin shared-torch-nvshmem >/dev/null 2>&1; echo "torch rc=$?" >> $R/summary.txt; cat $OUT/r152torch/summary.txt >> $R/summary.txt 2>/dev/null
cat $R/summary.txt
