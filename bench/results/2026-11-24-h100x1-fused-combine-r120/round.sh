# r120 (1x H100): fused one-node combine, warp-sized chunks, roles by start ticket, grid from occupancy
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NVST_DEVICE_TIMEOUT_S=20 NVST_TIMEOUT_S=60 NVST_TEST_SHARE_GPUS=1
R=$OUT/r120; mkdir -p $R; echo "commit $(cat var/COMMIT)" > $R/summary.txt
s() { local name=$1 t=$2; shift 2; local t0=$SECONDS; timeout -k 5 $t "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'passed|failed|not run|ERROR SUMMARY' $R/$name.log | tail -1 | cut -c1-200)" >> $R/summary.txt; }
SAN="compute-sanitizer --target-processes all --error-exitcode 9 --print-limit 20"
s ep_2pe 150 var/bin/nvst_ep_tests --np 2 --stress 3000 --ll-stress 100
s ep_4pe 150 var/bin/nvst_ep_tests --np 4 --stress 300 --ll-stress 50
NVST_NODE_SIZE=2 s ep_2x2 150 var/bin/nvst_ep_tests --np 4 --stress 200 --ll-stress 50
s memcheck_ep 150 $SAN --tool memcheck var/bin/nvst_ep_tests --np 2 --stress 20 --ll-stress 5
s racecheck_ep 150 $SAN --tool racecheck var/bin/nvst_ep_tests --np 2 --stress 3 --ll-stress 2
s coll_floor_1pe 90 var/bin/nvst bench coll --np 1 -b 1K -e 256K -f 4 -G 20
grep -h "FAIL" $R/*.log | head -20 >> $R/summary.txt
cd $R && tar czf ../r120.tgz ./*.log && rm -f ./*.log
