export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NVST_DEVICE_TIMEOUT_S=20 NVST_TIMEOUT_S=60
R=$OUT; B=build/bin
s() { local name=$1 t=$2; shift 2; local t0=$SECONDS; timeout -k 5 $t "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'passed|failed' $R/$name.log | tail -1)" | tee -a $R/summary.txt; }
echo "commit $(cat build/COMMIT)" > $R/summary.txt; nvidia-smi -L >> $R/summary.txt
s coll_2pe 240 $B/nvst_coll_tests --np 2
s bench_coll_auto 150 $B/nvst bench coll -b 1K -e 1M -f 2 --json $R/coll_auto.json
NVST_COLL_ALGO=oneshot s bench_coll_oneshot 150 $B/nvst bench coll -b 1K -e 1M -f 2 --json $R/coll_oneshot.json
NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=shm s ep_1x1 200 $B/nvst_ep_tests --np 2 --stress 300 --ll-stress 50
NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=shm s bench_ep_1x1_shm 150 $B/nvst bench ep --json $R/ep_1x1_shm.json
NVST_NODE_SIZE=1 s bench_ep_1x1_tcp 150 $B/nvst bench ep --json $R/ep_1x1_tcp.json
grep -E "all_reduce|^#" $R/bench_coll_auto.log | head -30
grep -E "all_reduce" $R/bench_coll_oneshot.log | head -20
tail -25 $R/bench_ep_1x1_shm.log
