# r168 (1x H100): `nvst bench` (the README's benchmark command) on a machine of one GPU: now the FIFO benchmark
# (PE 0's kernels -> its proxy; PE 1 idle on the same GPU) and then the host-side benchmarks
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/r168; mkdir -p $R; S=$R/summary.txt; echo "commit $(cat var/COMMIT)" > $S
t0=$SECONDS; timeout 540 var/bin/nvst bench --json $R/bench.json > $R/bench.log 2>&1; echo "nvst bench rc=$? $((SECONDS-t0))s" >> $S
ls $R >> $S; cat $S; grep -v "^\[" $R/bench.log | tail -60
