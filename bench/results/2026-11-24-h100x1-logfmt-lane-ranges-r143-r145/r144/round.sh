# r144 (1x H100, one PE): where the LogFMT send's time goes, by switching parts off (timing only; the
# outputs of noenc and norange are wrong): new (r143's lane-parallel ranges), noenc (every group sent
# as bf16: loads, folds, ranges, barriers and stores stay), norange (a cheap stand-in for the ranges)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/r144; mkdir -p $R; echo "commit $(cat var/COMMIT)" > $R/summary.txt
one() { RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$1 timeout 60 "${@:2}"; }
for i in 1 2; do
  for v in new noenc norange; do echo "$v, run $i" >> $R/summary.txt; one 29541 var/bin/llp_$v 2>&1 | grep "combine logfmt" >> $R/summary.txt; done
done
cat $R/summary.txt
