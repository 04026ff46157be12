# r107 (1x H100): old (1cd9c19) vs whole 256 KiB pieces (var/whole) vs whole + precise sleeps (var/bin), alternating twice
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NVST_DEVICE_TIMEOUT_S=20 NVST_TIMEOUT_S=60 NVST_TEST_SHARE_GPUS=1
R=$OUT/r107; mkdir -p $R
echo "commit $(cat var/COMMIT) (slack) vs var/whole vs 1cd9c19 (old); cores $(nproc)" > $R/summary.txt
for rep in 1 2; do
for prov in "tcp;ofi_rxm" shm; do p=${prov%%;*}
  for v in old whole slack; do B=var/bin; [ $v = old ] && B=var/old; [ $v = whole ] && B=var/whole
    NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=$prov timeout 150 $B/nvst bench p2p --np 2 -b 64K -e 16M -f 4 -n 20 -w 5 --samples 5 --json $R/p2p_${p}_${v}_$rep.json > $R/p2p_${p}_${v}_$rep.log 2>&1
    echo "p2p $p $v $rep rc=$?" >> $R/summary.txt
  done
done
done
python3 - >> $R/summary.txt <<'PY'
import json, glob, collections, os
R = os.environ["OUT"] + "/r107"
t = collections.defaultdict(list)
for f in sorted(glob.glob(R + "/p2p_*.json")):
    _, p, v, rep = os.path.basename(f)[:-5].split("_")
    for r in json.load(open(f))["rows"]:
        if r["impl"] != "nvst_proxy": t[(p, r["bytes"], r["impl"], v)].append(r["time_us"])
for p in ("tcp", "shm"):
    print(f"\n{p}: host-row us (rep1 / rep2), raw us")
    print("bytes      old             whole           slack           raw(old runs)")
    for b in sorted({k[1] for k in t if k[0] == p}):
        cells = ["%6.1f / %6.1f" % tuple(t[(p, b, "nvst_proxy_host", v)]) for v in ("old", "whole", "slack")]
        print(f"{b:>9}  " + "  ".join(cells) + "  %6.1f / %6.1f" % tuple(t[(p, b, "raw_fabric", "old")]))
PY
export NVST_PROXY_DEBUG=1
for prov in "tcp;ofi_rxm" shm; do p=${prov%%;*}
  NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=$prov timeout 200 var/bin/nvst_gpu_tests --np 2 > $R/gpu_internode_$p.log 2>&1; echo "gpu_internode_$p rc=$? $(grep -E 'passed|failed' $R/gpu_internode_$p.log | tail -1)" >> $R/summary.txt
done
cd $R && tar czf ../r107.tgz . && cd .. && rm -rf r107/*.log r107/*.json
