# r178 (2x H200): r176's `nvst bench ep` across 1+1 logical nodes (shm) timed out in its dispatch_fp8 pass: PE 0
# waited for PE 1's ready SET of the same launch (held the previous launch's value), PE 1 waited in the forward
# kernel. Reproduce with the proxy's state every 2 s (NVST_PROXY_DEBUG), then with every inbox piece traced, then tcp
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NVST_DEVICE_TIMEOUT_S=10 NVST_TIMEOUT_S=60 NVST_NODE_SIZE=1
DEADLINE=$((SECONDS + ${BUDGET:-400}))
R=$OUT/r178; mkdir -p $R; S=$R/summary.txt
python3 -c "import tarfile; tarfile.open('var/carry/bins.tar.xz').extractall('var/bin')" || exit 3
echo "commit $(cat var/COMMIT) $(nvidia-smi -L | wc -l) GPUs" > $S
t() { local name=$1 to=$2; shift 2; local rem=$((DEADLINE - SECONDS)); [ $rem -lt 20 ] && { echo "$name skipped: out of time" >> $S; return; }
      [ $to -gt $rem ] && to=$rem; local t0=$SECONDS; timeout -k 5 $to "$@" > $R/$name.log 2>&1
      echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'error|timed out' $R/$name.log | head -1 | cut -c1-200)" >> $S; }
B=var/bin
NVST_FABRIC_PROVIDER=shm NVST_PROXY_DEBUG=1 t ep_1x1_shm_debug 120 $B/nvst bench ep --json $R/ep_shm_debug.json
NVST_FABRIC_PROVIDER=shm NVST_PROXY_DEBUG=1 NVST_PROXY_TRACE=$R/tr t ep_1x1_shm_trace 120 $B/nvst bench ep
NVST_FABRIC_PROVIDER="tcp;ofi_rxm" NVST_PROXY_DEBUG=1 t ep_1x1_tcp_debug 150 $B/nvst bench ep --json $R/ep_tcp_debug.json
for f in $R/*.log; do echo "--- $f"; grep -v '^# progress' $f | grep -E 'proxy:|error|timed out|#wrong|^ ' | tail -14 | cut -c1-400; done >> $S
cd $R && tar czf results.tgz *.log *.json tr.* 2>/dev/null; rm -f *.log *.json tr.*
cat $S
