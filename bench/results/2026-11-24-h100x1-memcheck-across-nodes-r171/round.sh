# r171 (1x H100, PEs sharing it): memcheck of the device API across nodes with the cross-node stream-ordered-source
# case left out under the sanitizer (NVST_TEST_SANITIZER=1: it does what CUDA's rules forbid, r170), and on one node
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVST_TEST_SHARE_GPUS=1
R=$OUT/r171; mkdir -p $R; S=$R/summary.txt; echo "commit $(cat var/COMMIT)" > $S
SAN="env NVST_TEST_SANITIZER=1 compute-sanitizer --target-processes all --error-exitcode 9 --print-limit 20"
t() { local name=$1 to=$2; shift 2; local t0=$SECONDS; timeout $to "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'ERROR SUMMARY|passed' $R/$name.log | tail -2 | tr '\n' ' ' | cut -c1-150)" >> $S; }
NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=shm t memcheck_1x1_shm 300 $SAN --tool memcheck var/bin/nvst_gpu_tests --np 2 --rounds 1
NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER="tcp;ofi_rxm" t memcheck_1x1_tcp 300 $SAN --tool memcheck var/bin/nvst_gpu_tests --np 2 --rounds 1
t memcheck_one_node 300 $SAN --tool memcheck var/bin/nvst_gpu_tests --np 2 --rounds 1
grep -h "SKIP\|stream-ordered" $R/*.log | sort | uniq -c >> $S
cat $S
