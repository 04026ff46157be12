# r180 (2x H200): `nvst bench ep` across 1+1 logical nodes with the combine's input allocated before the dispatch
# (r178-r179: the cudaMalloc behind a cross-node dispatch stalled both proxies' copies); shm, then tcp
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NVST_DEVICE_TIMEOUT_S=20 NVST_TIMEOUT_S=60 NVST_NODE_SIZE=1
DEADLINE=$((SECONDS + ${BUDGET:-300}))
R=$OUT/r180; mkdir -p $R; S=$R/summary.txt
python3 -c "import tarfile; tarfile.open('var/carry2/nvst.tar.xz').extractall('var/bin')" || exit 3
echo "commit $(cat var/COMMIT) $(nvidia-smi -L | wc -l) GPUs" > $S
t() { local name=$1 to=$2; shift 2; local rem=$((DEADLINE - SECONDS)); [ $rem -lt 20 ] && { echo "$name skipped: out of time" >> $S; return; }
      [ $to -gt $rem ] && to=$rem; local t0=$SECONDS; timeout -k 5 $to "$@" > $R/$name.log 2>&1
      echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'error|timed out' $R/$name.log | head -1 | cut -c1-200)" >> $S; }
NVST_FABRIC_PROVIDER=shm t bench_ep_1x1_shm 150 var/bin/nvst bench ep --json $R/ep_1x1_shm.json
NVST_FABRIC_PROVIDER="tcp;ofi_rxm" t bench_ep_1x1_tcp 150 var/bin/nvst bench ep --json $R/ep_1x1_tcp.json
for f in $R/*.log; do echo "--- $f"; grep -v '^# progress' $f | grep -v '^$' | head -80; done >> $S
cd $R && tar czf results.tgz *.log *.json; rm -f *.log *.json
cat $S
