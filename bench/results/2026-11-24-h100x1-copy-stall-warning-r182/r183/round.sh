# r183 (1x H100, 2 PEs sharing it as 1+1 logical nodes over shm): r182 again after the review mend (one landing_pending, the copy asked only of an old piece)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVST_TEST_SHARE_GPUS=1
export NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=shm NVST_TIMEOUT_S=60
R=$OUT/r183; mkdir -p $R; S=$R/summary.txt
python3 -c "import tarfile; tarfile.open('var/carry3/bins.tar.xz').extractall('var/bin')" || exit 3
echo "commit $(cat var/COMMIT)" > $S
t() { local name=$1 to=$2; shift 2; local t0=$SECONDS; timeout -k 5 $to "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'passed' $R/$name.log | tail -1 | cut -c1-120)" >> $S; }
CUDA_DEVICE_MAX_CONNECTIONS=1 NVST_DEVICE_TIMEOUT_S=12 t ep_conn1_stall 90 var/bin/nvst_ep_tests --np 2 --stress 5 --ll-stress 1
grep -h 'has not finished\|stuck for\|timed out' $R/ep_conn1_stall.log | cut -c1-330 | head -6 >> $S
NVST_DEVICE_TIMEOUT_S=20 t ep_1x1 200 var/bin/nvst_ep_tests --np 2 --stress 100 --ll-stress 20
NVST_DEVICE_TIMEOUT_S=20 t api_1x1 200 var/bin/nvst_gpu_tests --np 2
grep -h 'has not finished' $R/ep_1x1.log $R/api_1x1.log | head -3 >> $S
cd $R && tar czf logs.tgz *.log && rm -f *.log; cat $S
