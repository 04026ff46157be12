# r106 (1x H100): edge pieces and whole 256 KiB pieces (var/bin, new) against 1cd9c19 (var/old), same run
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NVST_DEVICE_TIMEOUT_S=20 NVST_TIMEOUT_S=60 NVST_TEST_SHARE_GPUS=1
R=$OUT/r106; mkdir -p $R
echo "commit $(cat var/COMMIT) (new) vs 1cd9c19 (old); cores $(nproc)" > $R/summary.txt
rows() { python3 -c "
import json
for r in json.load(open('$1'))['rows']:
  if r['impl']!='nvst_proxy': print('$2', r['impl'], r['bytes'], round(r['time_us'],1), round(r['algbw_gbps'],2), r['wrong'])"; }
for prov in "tcp;ofi_rxm" shm; do
  p=${prov%%;*}
  for v in old new; do B=var/bin; [ $v = old ] && B=var/old
    NVST_PROXY_TRACE=$R/tr_${p}_$v NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=$prov timeout 150 $B/nvst bench p2p --np 2 -b 64K -e 64M -f 4 -n 20 -w 5 --samples 5 --json $R/p2p_${p}_$v.json > $R/p2p_${p}_$v.log 2>&1
    echo "== p2p $p $v rc=$?" >> $R/summary.txt; rows $R/p2p_${p}_$v.json $v >> $R/summary.txt
    python3 scripts/proxy_trace.py $R/tr_${p}_$v --from host --bytes 1048576 >> $R/summary.txt 2>&1
    NVST_PROXY_INBOX=1 NVST_FABRIC_PROVIDER=$prov timeout 120 $B/nvst bench host --np 2 -b 64K -e 64M -f 4 -n 20 -w 5 --samples 5 > $R/host_${p}_$v.log 2>&1
    echo "== host-heap inbox $p $v rc=$?" >> $R/summary.txt; grep -A8 "op: fabric_put" $R/host_${p}_$v.log >> $R/summary.txt
  done
done
export NVST_PROXY_DEBUG=1
for prov in "tcp;ofi_rxm" shm; do p=${prov%%;*}
  NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=$prov timeout 200 var/bin/nvst_gpu_tests --np 2 > $R/gpu_internode_$p.log 2>&1; echo "gpu_internode_$p rc=$? $(grep -E 'passed|failed' $R/gpu_internode_$p.log | tail -1)" >> $R/summary.txt
done
NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=shm timeout 200 var/bin/nvst_gpu_tests --np 3 > $R/gpu_internode_shm_3pe.log 2>&1; echo "gpu_internode_shm_3pe rc=$? $(grep -E 'passed|failed' $R/gpu_internode_shm_3pe.log | tail -1)" >> $R/summary.txt
cd $R && tar czf ../r106.tgz . && cd .. && rm -rf r106/tr_* r106/*.log r106/*.json
