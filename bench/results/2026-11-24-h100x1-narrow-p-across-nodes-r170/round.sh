# r170 (1x H100, PEs sharing it): p of 1, 2 and 4 bytes across nodes (a narrow signal SET through the proxy): the
# device API suite at 1+1 over tcp and shm, 3x1, on one node, and memcheck at 1+1; EP and collectives at 1+1 (signals)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVST_TEST_SHARE_GPUS=1
R=$OUT/r170; mkdir -p $R; S=$R/summary.txt; echo "commit $(cat var/COMMIT)" > $S
t() { local name=$1 to=$2; shift 2; local t0=$SECONDS; timeout $to "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'passed|PASSED|FAILED|failed' $R/$name.log | tail -1 | cut -c1-120)" >> $S; }
NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER="tcp;ofi_rxm" t api_1x1_tcp 200 var/bin/nvst_gpu_tests --np 2
NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=shm t api_1x1_shm 200 var/bin/nvst_gpu_tests --np 2
NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=shm t api_3x1_shm 240 var/bin/nvst_gpu_tests --np 3
t api_one_node 200 var/bin/nvst_gpu_tests --np 2
NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=shm t memcheck_1x1 300 compute-sanitizer --target-processes all --error-exitcode 9 --print-limit 20 --tool memcheck var/bin/nvst_gpu_tests --np 2 --rounds 1
NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=shm t ep_1x1 200 var/bin/nvst_ep_tests --np 2 --stress 200 --ll-stress 50
NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=shm t coll_1x1 300 var/bin/nvst_coll_tests --np 2
grep -h "PASS p<\|FAIL" $R/api_1x1_tcp.log | head -8 >> $S
cd $R && tar czf logs.tgz *.log && rm -f *.log; cat $S
