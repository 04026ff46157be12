# r163 (1x H100, 2 PEs sharing it): barriers on the NVSHMEM backend through our flags and bootstrap (timeouts, a dead
# peer named); device API and error scenarios (new: a dead peer in a host and in a device barrier) on both backends,
# collectives and EP on NVSHMEM
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVST_TEST_SHARE_GPUS=1
R=$OUT/r163; mkdir -p $R; S=$R/summary.txt; echo "commit $(cat var/COMMIT)" > $S
t() { local name=$1 to=$2; shift 2; local t0=$SECONDS; timeout $to "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'passed|PASSED|FAILED|failed' $R/$name.log | tail -1 | cut -c1-120)" >> $S; }
lib=$(python3 -c "import nvidia,os;print(os.path.join(list(nvidia.__path__)[0],'nvshmem','lib'))")
t errors_ours 150 var/bin/nvst_gpu_tests --np 2 --mode errors
LD_LIBRARY_PATH=$lib NVST_BACKEND=nvshmem t errors_nvshmem 150 var/bin/nvst_gpu_tests_nvshmem --np 2 --mode errors
t api_ours 240 var/bin/nvst_gpu_tests --np 2
LD_LIBRARY_PATH=$lib NVST_BACKEND=nvshmem t api_nvshmem 240 var/bin/nvst_gpu_tests_nvshmem --np 2
LD_LIBRARY_PATH=$lib NVST_BACKEND=nvshmem t coll_nvshmem 240 var/bin/nvst_coll_tests_nvshmem --np 2
LD_LIBRARY_PATH=$lib NVST_BACKEND=nvshmem t ep_nvshmem 200 var/bin/nvst_ep_tests_nvshmem --np 2 --stress 300 --ll-stress 50
grep -h "dead peer\|errors/" $R/errors_*.log >> $S
cd $R && tar czf logs.tgz *.log && rm -f *.log; cat $S
