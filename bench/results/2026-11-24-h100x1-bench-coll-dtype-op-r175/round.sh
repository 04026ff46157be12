# r175 (1x H100, 2 PEs sharing it): `nvst bench coll` with nccl-tests' -d and -o; on a shared GPU ours only (NCCL
# refuses it), so this checks every dtype x op's results (#wrong), not times
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/r175; mkdir -p $R; S=$R/summary.txt; echo "commit $(cat var/COMMIT)" > $S
for c in "bfloat16 sum" "half max" "float min" "int32 prod" "int64 sum" "float prod" "bfloat16 prod" "int64 max"; do
  set -- $c
  timeout 120 var/bin/nvst bench coll --np 2 -d $1 -o $2 -b 1K -e 1M -f 16 -n 2 -w 1 --samples 1 -G 2 --json $R/coll_$1_$2.json > $R/coll_$1_$2.log 2>&1
  rc=$?
  rows=$(python3 -c "import json;d=json.load(open('$R/coll_$1_$2.json'));r=d['rows'];print(len(r), sum(x.get('wrong',0) for x in r), sorted({x['op'] for x in r}))" 2>&1)
  echo "-d $1 -o $2 rc=$rc rows,wrong,ops: $rows" >> $S
done
timeout 60 var/bin/nvst bench coll -d float > $R/one_pe.txt 2>&1; echo "one GPU without --np: rc=$? $(tail -1 $R/one_pe.txt | cut -c1-160)" >> $S
grep -v "^\[\|progress" $R/coll_half_max.log | tail -14 > $R/half_max_table.txt
cd $R && tar czf logs.tgz *.log *.json && rm -f *.log *.json; cat $S half_max_table.txt
