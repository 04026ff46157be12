# r132 (1x H100): receive halves launched with programmatic dependent launch; base = e7fddcb (r131)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NVST_DEVICE_TIMEOUT_S=20 NVST_TIMEOUT_S=60
R=$OUT/r132; mkdir -p $R; echo "commit $(cat var/COMMIT)" > $R/summary.txt
one() { RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$1 timeout 120 "${@:2}"; }
for i in 1 2; do
  echo "r131 (e7fddcb), run $i" >> $R/summary.txt; one 29521 var/bin/ll_phases_r131 >> $R/summary.txt 2>&1
  echo "new, run $i" >> $R/summary.txt; one 29522 var/bin/ll_phases_new >> $R/summary.txt 2>&1
done
NVST_TEST_SHARE_GPUS=1 timeout 200 var/bin/nvst_ep_tests --np 2 --stress 100 --ll-stress 1000 > $R/ep_2pe.log 2>&1; echo "ep_2pe rc=$? $(grep -E 'passed|failed' $R/ep_2pe.log | tail -1)" >> $R/summary.txt
NVST_TEST_SHARE_GPUS=1 NVST_NODE_SIZE=2 timeout 200 var/bin/nvst_ep_tests --np 4 --stress 50 --ll-stress 200 > $R/ep_2x2.log 2>&1; echo "ep_2x2 rc=$? $(grep -E 'passed|failed' $R/ep_2x2.log | tail -1)" >> $R/summary.txt
SAN="compute-sanitizer --target-processes all --error-exitcode 9 --print-limit 20"
NVST_TEST_SHARE_GPUS=1 timeout -k 5 200 $SAN --tool memcheck var/bin/nvst_ep_tests --np 2 --stress 10 --ll-stress 5 > $R/memcheck_ep.log 2>&1; echo "memcheck_ep rc=$? $(grep -E 'passed|failed|ERROR SUMMARY' $R/memcheck_ep.log | tail -1)" >> $R/summary.txt
NVST_TEST_SHARE_GPUS=1 timeout -k 5 200 $SAN --tool racecheck var/bin/nvst_ep_tests --np 2 --stress 3 --ll-stress 2 > $R/racecheck_ep.log 2>&1; echo "racecheck_ep rc=$? $(grep -E 'passed|failed|ERROR SUMMARY' $R/racecheck_ep.log | tail -1)" >> $R/summary.txt
grep -h FAIL $R/*.log | head >> $R/summary.txt
cd $R && tar czf ../r132.tgz ./*.log && rm -f ./*.log
cat $OUT/r132/summary.txt
