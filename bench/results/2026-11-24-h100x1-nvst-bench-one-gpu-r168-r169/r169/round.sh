# r169 (1x H100): `nvst bench` on one GPU again, after the PEs of each benchmark get its own --json and -e (r168: the host run overwrote the fifo JSON)
# (PE 0's kernels -> its proxy; PE 1 idle on the same GPU) and then the host-side benchmarks
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/r169; mkdir -p $R; S=$R/summary.txt; echo "commit $(cat var/COMMIT)" > $S
t0=$SECONDS; timeout 540 var/bin/nvst bench --json $R/bench.json > $R/bench.log 2>&1; echo "nvst bench rc=$? $((SECONDS-t0))s" >> $S
ls $R >> $S; cat $S; grep -c "\"op\"" $R/*.json; grep -v "^\[" $R/bench.log | grep "fifo\|wrote"
