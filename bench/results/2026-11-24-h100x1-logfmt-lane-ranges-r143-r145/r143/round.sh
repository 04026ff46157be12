# r143 (1x H100, one PE): LogFMT ranges worked out by lane u of each half-warp for its group u
# (new) against HEAD (head), ll_phases.cu alternating 3 times; the EP suite at 1 PE on new
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/r143; mkdir -p $R; echo "commit $(cat var/COMMIT)" > $R/summary.txt
one() { RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$1 timeout 60 "${@:2}"; }
for i in 1 2 3; do
  for v in head new; do echo "$v, run $i" >> $R/summary.txt; one 29541 var/bin/llp_$v 2>&1 | grep combine >> $R/summary.txt; done
done
( time timeout 200 var/bin/nvst_ep_tests --np 1 ) > $R/ep_np1.log 2>&1; echo "ep np1 rc=$?" >> $R/summary.txt
grep -iE "logfmt|passed|failed" $R/ep_np1.log | tail -8 >> $R/summary.txt
cat $R/summary.txt
