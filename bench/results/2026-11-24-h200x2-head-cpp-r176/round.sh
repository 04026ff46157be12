# r176 (2x H200, first 2-GPU machine since r92): the C++ suites and benchmarks at HEAD on two real GPUs:
# device API, errors, collectives, EP (10^4 + 10^3 random), bench p2p/coll/ep; then 1+1 logical nodes:
# device API, fifo, p2p across nodes (shm, tcp) with a traced kernel-issued pass, bench ep across nodes, EP tests
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NVST_DEVICE_TIMEOUT_S=20 NVST_TIMEOUT_S=60
DEADLINE=$((SECONDS + ${BUDGET:-575}))
R=$OUT/r176; mkdir -p $R; S=$R/summary.txt
python3 -c "import tarfile; tarfile.open('var/carry/bins.tar.xz').extractall('var/bin')" || exit 3
echo "commit $(cat var/COMMIT) $(nvidia-smi -L | wc -l) GPUs" > $S
{ nvidia-smi; nvidia-smi topo -m; } > $R/machine.log 2>&1
t() { local name=$1 to=$2; shift 2; local rem=$((DEADLINE - SECONDS)); [ $rem -lt 20 ] && { echo "$name skipped: out of time" >> $S; return; }
      [ $to -gt $rem ] && to=$rem; local t0=$SECONDS; timeout -k 5 $to "$@" > $R/$name.log 2>&1
      echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'passed|failed|ERROR SUMMARY' $R/$name.log | tail -1 | cut -c1-110)" >> $S; }
B=var/bin
t info 30 $B/nvst info
t api_2pe 120 $B/nvst_gpu_tests --np 2
t errors_2pe 120 $B/nvst_gpu_tests --mode errors --np 2
t coll_2pe 200 $B/nvst_coll_tests --np 2
t ep_2pe 200 $B/nvst_ep_tests --np 2 --stress 10000 --ll-stress 1000
t bench_p2p 120 $B/nvst bench p2p --json $R/p2p.json
t bench_coll 200 $B/nvst bench coll -b 1K -e 256M -f 4 --json $R/coll.json
NVST_COLL_ALGO=oneshot t bench_coll_oneshot 90 $B/nvst bench coll -b 1K -e 1M -f 4 --json $R/coll_oneshot.json
t bench_ep 120 $B/nvst bench ep --json $R/ep.json
export NVST_NODE_SIZE=1
NVST_FABRIC_PROVIDER=shm t api_1x1_shm 120 $B/nvst_gpu_tests --np 2
t bench_fifo 60 $B/nvst bench fifo --json $R/fifo.json
for prov in shm "tcp;ofi_rxm"; do p=${prov%%;*}
  NVST_FABRIC_PROVIDER=$prov t bench_p2p_1x1_$p 120 $B/nvst bench p2p -b 4K -e 64M -f 4 --json $R/p2p_1x1_$p.json
done
NVST_FABRIC_PROVIDER=shm t bench_ep_1x1_shm 150 $B/nvst bench ep --json $R/ep_1x1_shm.json
NVST_FABRIC_PROVIDER=shm t ep_1x1_shm 150 $B/nvst_ep_tests --np 2 --stress 300 --ll-stress 50
for prov in shm "tcp;ofi_rxm"; do p=${prov%%;*}
  NVST_FABRIC_PROVIDER=$prov NVST_PROXY_TRACE=$R/tr_$p t trace_p2p_1x1_$p 60 $B/nvst bench p2p -b 1M -e 16M -f 16 -n 20 -w 5 --samples 3
  for sz in 1048576 16777216; do echo "trace $p $sz:" >> $S; timeout 30 python3 scripts/proxy_trace.py $R/tr_$p --from kernel --bytes $sz >> $S 2>&1; done
  rm -f $R/tr_$p.*
done
cd $R && tar czf results.tgz *.log *.json && rm -f *.log *.json
cat $S
