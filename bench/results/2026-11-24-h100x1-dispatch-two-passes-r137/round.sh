# r137 (1x H100): the low-latency dispatch loads two passes of the token before the slot claims; base = 7a13aa8
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NVST_DEVICE_TIMEOUT_S=20 NVST_TIMEOUT_S=60
R=$OUT/r137; mkdir -p $R; echo "commit $(cat var/COMMIT)" > $R/summary.txt
one() { RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$1 timeout 120 "${@:2}"; }
for i in 1 2 3; do
  echo "base, run $i" >> $R/summary.txt; one 29521 var/bin/ll_phases_base 2>&1 | grep dispatch >> $R/summary.txt
  echo "new, run $i" >> $R/summary.txt; one 29522 var/bin/ll_phases_new 2>&1 | grep dispatch >> $R/summary.txt
done
s() { local name=$1 t=$2; shift 2; local t0=$SECONDS; timeout -k 5 $t "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'passed|failed' $R/$name.log | tail -1)" >> $R/summary.txt; }
export NVST_TEST_SHARE_GPUS=1
s ep_2pe 200 var/bin/nvst_ep_tests --np 2 --stress 100 --ll-stress 1000
NVST_NODE_SIZE=2 s ep_2x2 200 var/bin/nvst_ep_tests --np 4 --stress 50 --ll-stress 200
grep -h "FAIL" $R/*.log | head >> $R/summary.txt
(cd $R && tar czf ../r137.tgz ./*.log && rm -f ./*.log)
cat $R/summary.txt
