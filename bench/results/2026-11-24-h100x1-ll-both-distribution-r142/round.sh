# r142 (1x H100): HEAD's EP suite at 2 PEs sharing the GPU (126bf8d never ran on a GPU), and the
# distribution of one low-latency op's both-halves time, with and without early launch (ll_both.cu)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/r142; mkdir -p $R; echo "commit $(cat var/COMMIT)" > $R/summary.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv >> $R/summary.txt
one() { RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$1 timeout 60 "${@:2}"; }
for i in 1 2 3; do
  echo "pdl, process $i" >> $R/summary.txt; one 29531 var/bin/ll_both_final >> $R/summary.txt 2>&1
  echo "nopdl, process $i" >> $R/summary.txt; one 29532 var/bin/ll_both_nopdl >> $R/summary.txt 2>&1
done
( time NVST_TEST_SHARE_GPUS=1 timeout 300 var/bin/nvst_ep_tests --np 2 ) > $R/ep_np2.log 2>&1; echo "ep np2 rc=$?" >> $R/summary.txt
tail -5 $R/ep_np2.log >> $R/summary.txt
cat $R/summary.txt
