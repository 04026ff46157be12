# r113 (1x H100): how many staging copies to queue ahead (NVST_PROXY_STAGE_AHEAD, an experiment knob): 16 (as before), 4, 2
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NVST_DEVICE_TIMEOUT_S=20 NVST_TIMEOUT_S=60 NVST_TEST_SHARE_GPUS=1
R=$OUT/r113; mkdir -p $R; cat var/COMMIT > $R/summary.txt
for rep in 1 2; do for prov in "tcp;ofi_rxm" shm; do p=${prov%%;*}; for a in 16 4 2; do
  NVST_PROXY_STAGE_AHEAD=$a NVST_PROXY_TRACE=$R/tr_${p}_${a}_$rep NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=$prov timeout 150 var/bin/nvst bench p2p --np 2 -b 64K -e 16M -f 4 -n 20 -w 5 --samples 5 --json $R/p2p_${p}_${a}_$rep.json > $R/p2p_${p}_${a}_$rep.log 2>&1
  echo "p2p $p ahead=$a rep=$rep rc=$?" >> $R/summary.txt
  [ $rep = 1 ] && python3 scripts/proxy_trace.py $R/tr_${p}_${a}_$rep --from kernel --bytes 1048576 >> $R/summary.txt 2>&1
  rm -f $R/tr_${p}_${a}_$rep.*
done; done; done
python3 - >> $R/summary.txt <<'PY'
import json, glob, collections, os
R = os.environ["OUT"] + "/r113"
t = collections.defaultdict(list)
for f in sorted(glob.glob(R + "/p2p_*.json")):
    _, p, a, rep = os.path.basename(f)[:-5].split("_")
    for r in json.load(open(f))["rows"]:
        t[(p, r["bytes"], r["impl"], a)].append(r["time_us"])
for p in ("tcp", "shm"):
    for impl in ("nvst_proxy", "nvst_proxy_host"):
        print(f"\n{p} {impl}: us rep1/rep2 for ahead 16 | 4 | 2; raw")
        for b in sorted({k[1] for k in t if k[0] == p}):
            cells = ["%7.1f/%7.1f" % tuple(t[(p, b, impl, a)]) for a in ("16", "4", "2")]
            raw = t[(p, b, "raw_fabric", "16")] + t[(p, b, "raw_fabric", "2")]
            print(f"{b:>9} " + " | ".join(cells) + "  raw " + "/".join("%.1f" % x for x in raw))
PY
cd $R && tar czf ../r113.tgz ./*.log ./*.json && rm -f ./*.log ./*.json
