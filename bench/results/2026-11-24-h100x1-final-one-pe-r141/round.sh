# r141 (1x H100, one PE): the final state's one-PE timings: collectives back to back (coll_gap.cu, a8a3d9e's coll.cu as "old") and the low-latency halves (ll_phases.cu)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/r141; mkdir -p $R; echo "commit $(cat var/COMMIT)" > $R/summary.txt
one() { RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$1 timeout 60 "${@:2}"; }
for i in 1 2; do
  echo "coll old, run $i" >> $R/summary.txt; one 29521 var/bin/coll_gap_old >> $R/summary.txt 2>&1
  echo "coll final, run $i" >> $R/summary.txt; one 29522 var/bin/coll_gap_final >> $R/summary.txt 2>&1
  echo "ll final, run $i" >> $R/summary.txt; one 29523 var/bin/ll_phases_final >> $R/summary.txt 2>&1
done
cat $R/summary.txt
