# r104 (1x H100): where the proxy thread's time goes on the inter-node path
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NVST_DEVICE_TIMEOUT_S=20 NVST_TIMEOUT_S=60 NVST_TEST_SHARE_GPUS=1
B=var/bin; R=$OUT/r104; mkdir -p $R
echo "commit $(cat var/COMMIT) cores $(nproc)" > $R/summary.txt; nvidia-smi -L >> $R/summary.txt
s() { local name=$1 t=$2; shift 2; local t0=$SECONDS; timeout -k 5 $t "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s" >> $R/summary.txt; }
for prov in "tcp;ofi_rxm" shm; do
  p=${prov%%;*}
  for sz in 1M 16M; do
    NVST_PROXY_DEBUG=1 NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=$prov s p2p_${p}_$sz 120 $B/nvst bench p2p --np 2 -b $sz -e $sz -n 20 -w 5 --samples 5 --json $R/p2p_${p}_$sz.json
    NVST_PROXY_DEBUG=1 NVST_PROXY_INBOX=1 NVST_FABRIC_PROVIDER=$prov s host_${p}_$sz 120 $B/nvst bench host --np 2 -b $sz -e $sz -n 20 -w 5 --samples 5
  done
done
cd $R && for f in *.log; do echo "== $f"; grep -E "^ +[0-9]+[KM] |finished" $f; done | tee -a summary.txt
tar czf ../r104.tgz . && cd .. && rm -rf r104/*.log r104/*.json
