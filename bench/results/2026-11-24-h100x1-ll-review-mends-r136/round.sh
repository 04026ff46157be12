# r136 (1x H100): review mends (PDL only right behind a send half, smaller LogFMT stage, tests at 300 experts a PE, top-24); EP suites at every node shape and on NVSHMEM
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NVST_DEVICE_TIMEOUT_S=20 NVST_TIMEOUT_S=60
R=$OUT/r136; mkdir -p $R; echo "commit $(cat var/COMMIT)" > $R/summary.txt
one() { RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$1 timeout 120 "${@:2}"; }
for i in 1 2; do
  echo "base (9b7583e), run $i" >> $R/summary.txt; one 29521 var/bin/ll_phases_base >> $R/summary.txt 2>&1
  echo "new, run $i" >> $R/summary.txt; one 29522 var/bin/ll_phases_new >> $R/summary.txt 2>&1
done
s() { local name=$1 t=$2; shift 2; local t0=$SECONDS; timeout -k 5 $t "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'passed|failed|ERROR SUMMARY|RACECHECK SUMMARY' $R/$name.log | tail -1)" >> $R/summary.txt; }
export NVST_TEST_SHARE_GPUS=1
s ep_2pe 200 var/bin/nvst_ep_tests --np 2 --stress 100 --ll-stress 1000
NVST_NODE_SIZE=2 s ep_2x2 200 var/bin/nvst_ep_tests --np 4 --stress 50 --ll-stress 200
NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=shm s ep_1x1_shm 200 var/bin/nvst_ep_tests --np 2 --stress 50 --ll-stress 100
SAN="compute-sanitizer --target-processes all --error-exitcode 9 --print-limit 20"
s racecheck_ep 200 $SAN --tool racecheck var/bin/nvst_ep_tests --np 2 --stress 3 --ll-stress 2
lib=$(python3 -c "import nvidia,os;print(os.path.join(list(nvidia.__path__)[0],'nvshmem','lib'))")
LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" NVST_BACKEND=nvshmem s ep_nvshmem_2pe 200 var/bin/nvst_ep_tests_nvshmem --np 2 --stress 50 --ll-stress 200
grep -h "FAIL" $R/*.log | head >> $R/summary.txt
(cd $R && tar czf ../r136.tgz ./*.log && rm -f ./*.log)
cat $R/summary.txt
