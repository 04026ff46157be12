# r145 (1x H100, one PE): the combine send in blocks of 512 threads, a LogFMT half-warp taking 2 groups a
# round (w512: 32 warps an SM instead of 16; 64 registers, some spilled) against r143 (new)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/r145; mkdir -p $R; echo "commit $(cat var/COMMIT)" > $R/summary.txt
one() { RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$1 timeout 60 "${@:2}"; }
for i in 1 2; do
  for v in new w512; do echo "$v, run $i" >> $R/summary.txt; one 29541 var/bin/llp_$v 2>&1 | grep combine >> $R/summary.txt; done
done
cat $R/summary.txt
