# r105 (1x H100): a put's timeline on the inter-node path (NVST_PROXY_TRACE)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NVST_DEVICE_TIMEOUT_S=20 NVST_TIMEOUT_S=60 NVST_TEST_SHARE_GPUS=1
B=var/bin; R=$OUT/r105; mkdir -p $R
echo "commit $(cat var/COMMIT) cores $(nproc)" > $R/summary.txt
for prov in "tcp;ofi_rxm" shm; do
  p=${prov%%;*}
  for sz in 1M 16M; do
    NVST_PROXY_TRACE=$R/tr_${p}_$sz NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=$prov timeout 120 $B/nvst bench p2p --np 2 -b $sz -e $sz -n 20 -w 5 --samples 5 --json $R/p2p_${p}_$sz.json > $R/p2p_${p}_$sz.log 2>&1
    echo "== $p $sz rc=$?" >> $R/summary.txt
    python3 -c "
import json
for r in json.load(open('$R/p2p_${p}_$sz.json'))['rows']: print(r['impl'], r['bytes'], round(r['time_us'],1), round(r['algbw_gbps'],2), r['wrong'])" >> $R/summary.txt
    for o in host kernel; do python3 scripts/proxy_trace.py $R/tr_${p}_$sz --from $o >> $R/summary.txt 2>&1; done
  done
done
cd $R && tar czf ../r105.tgz . && cd .. && rm -rf r105/tr_* r105/*.log r105/*.json
