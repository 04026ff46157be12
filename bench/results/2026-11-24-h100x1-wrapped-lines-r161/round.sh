# r161 (1x H100, PEs sharing it): 6cf883e (lines wrapped; coll.cu's grids through blocks_for): device API, collectives
# at 2 and 4 PEs, EP at 2 PEs, EP on NVSHMEM, EP across 1+1 logical nodes
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVST_TEST_SHARE_GPUS=1
R=$OUT/r161; mkdir -p $R; S=$R/summary.txt; echo "commit $(cat var/COMMIT)" > $S
t() { local name=$1 to=$2; shift 2; local t0=$SECONDS; timeout $to "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'passed|PASSED|FAILED|failed' $R/$name.log | tail -1 | cut -c1-120)" >> $S; }
t gpu_api_2pe 240 var/bin/nvst_gpu_tests --np 2
t coll_2pe 200 var/bin/nvst_coll_tests --np 2
t coll_4pe 300 var/bin/nvst_coll_tests --np 4
t ep_2pe 200 var/bin/nvst_ep_tests --np 2 --stress 300 --ll-stress 50
lib=$(python3 -c "import nvidia,os;print(os.path.join(list(nvidia.__path__)[0],'nvshmem','lib'))")
LD_LIBRARY_PATH=$lib NVST_BACKEND=nvshmem t ep_2pe_nvshmem 200 var/bin/nvst_ep_tests_nvshmem --np 2 --stress 300 --ll-stress 50
NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=shm t ep_1x1_shm 200 var/bin/nvst_ep_tests --np 2 --stress 300 --ll-stress 50
cd $R && tar czf logs.tgz *.log && rm -f *.log; cat $S
