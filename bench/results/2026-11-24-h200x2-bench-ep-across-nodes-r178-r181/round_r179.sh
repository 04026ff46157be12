# r179 (2x H200): r178 showed both proxies with 16 staged pieces whose D2H staging copies (cudaMemcpyAsync on the
# proxy's own non-blocking stream) never completed, while both kernels waited on the proxy. Hypothesis: the proxy's
# stream shares a hardware work queue (CUDA_DEVICE_MAX_CONNECTIONS, 8 by default) with the bench's stream, where the
# next queued dispatch waits for the running one. Test: 32 connections (should pass), 1 connection (should hang).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NVST_DEVICE_TIMEOUT_S=10 NVST_TIMEOUT_S=60 NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=shm
DEADLINE=$((SECONDS + ${BUDGET:-330}))
R=$OUT/r179; mkdir -p $R; S=$R/summary.txt
python3 -c "import tarfile; tarfile.open('var/carry/bins.tar.xz').extractall('var/bin')" || exit 3
echo "commit $(cat var/COMMIT) $(nvidia-smi -L | wc -l) GPUs" > $S
t() { local name=$1 to=$2; shift 2; local rem=$((DEADLINE - SECONDS)); [ $rem -lt 20 ] && { echo "$name skipped: out of time" >> $S; return; }
      [ $to -gt $rem ] && to=$rem; local t0=$SECONDS; timeout -k 5 $to "$@" > $R/$name.log 2>&1
      echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'error|timed out|passed' $R/$name.log | head -1 | cut -c1-200)" >> $S; }
B=var/bin
CUDA_DEVICE_MAX_CONNECTIONS=32 t ep_1x1_shm_conn32 150 $B/nvst bench ep --json $R/ep_1x1_shm_conn32.json
CUDA_DEVICE_MAX_CONNECTIONS=1 t ep_1x1_shm_conn1 60 $B/nvst bench ep
CUDA_DEVICE_MAX_CONNECTIONS=1 t eptests_1x1_conn1 60 $B/nvst_ep_tests --np 2 --stress 50 --ll-stress 10
CUDA_DEVICE_MAX_CONNECTIONS=32 NVST_FABRIC_PROVIDER="tcp;ofi_rxm" t ep_1x1_tcp_conn32 150 $B/nvst bench ep --json $R/ep_1x1_tcp_conn32.json
for f in $R/ep_1x1_shm_conn32.log $R/ep_1x1_tcp_conn32.log; do echo "--- $f"; grep -v '^# progress' $f | head -70; done >> $S
cd $R && tar czf results.tgz *.log *.json; rm -f *.log *.json
cat $S
