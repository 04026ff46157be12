# r174 (1x H100, 4 PEs sharing it as 2x2 logical nodes over shm): the final proxy (narrow SETs, widths checked at
# landing) under EP and the device API at 2x2
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVST_TEST_SHARE_GPUS=1
export NVST_NODE_SIZE=2 NVST_FABRIC_PROVIDER=shm
R=$OUT/r174; mkdir -p $R; S=$R/summary.txt; echo "commit $(cat var/COMMIT)" > $S
t() { local name=$1 to=$2; shift 2; local t0=$SECONDS; timeout $to "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'passed' $R/$name.log | tail -1 | cut -c1-120)" >> $S; }
t ep_2x2 280 var/bin/nvst_ep_tests --np 4 --stress 300 --ll-stress 50
t api_2x2 240 var/bin/nvst_gpu_tests --np 4
cd $R && tar czf logs.tgz *.log && rm -f *.log; cat $S
