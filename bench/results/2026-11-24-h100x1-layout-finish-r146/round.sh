# r146 (1x H100): the layout without memsets or copies to the host (count_kernel's blocks store their
# counts as rows of a table, finish_kernel scans send_pos/node_pos and sums the counts, for a first
# dispatch straight into pinned host memory). first_dispatch.cu (r121's probe) new vs head (580733f's
# library) alternating twice; then the EP suite at 2 PEs sharing the GPU on new
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/r146; mkdir -p $R; echo "commit $(cat var/COMMIT)" > $R/summary.txt
one() { RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$1 timeout 90 "${@:2}"; }
for i in 1 2; do
  for v in head new; do echo "$v, run $i" >> $R/summary.txt; one 29551 var/bin/fd_$v >> $R/summary.txt 2>&1; done
done
( time NVST_TEST_SHARE_GPUS=1 timeout 330 var/bin/nvst_ep_tests --np 2 ) > $R/ep_np2.log 2>&1; echo "ep np2 rc=$?" >> $R/summary.txt
grep -E "FAIL|passed|real" $R/ep_np2.log | tail -5 >> $R/summary.txt
cat $R/summary.txt
