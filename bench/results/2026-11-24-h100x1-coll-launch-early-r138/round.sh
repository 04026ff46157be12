# r138 (1x H100): collectives launched early (programmatic dependent launch); coll_gap.cu at one PE old (HEAD) vs new; suites
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NVST_DEVICE_TIMEOUT_S=20 NVST_TIMEOUT_S=60
R=$OUT/r138; mkdir -p $R; echo "commit $(cat var/COMMIT)" > $R/summary.txt
one() { RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$1 timeout 120 "${@:2}"; }
for i in 1 2 3; do
  echo "old, run $i" >> $R/summary.txt; one 29521 var/bin/coll_gap_old >> $R/summary.txt 2>&1
  echo "new, run $i" >> $R/summary.txt; one 29522 var/bin/coll_gap_new >> $R/summary.txt 2>&1
done
s() { local name=$1 t=$2; shift 2; local t0=$SECONDS; timeout -k 5 $t "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'passed|failed' $R/$name.log | tail -1)" >> $R/summary.txt; }
export NVST_TEST_SHARE_GPUS=1
s coll_2pe 200 var/bin/nvst_coll_tests --np 2
s ep_2pe 120 var/bin/nvst_ep_tests --np 2 --stress 20 --ll-stress 100
lib=$(python3 -c "import nvidia,os;print(os.path.join(list(nvidia.__path__)[0],'nvshmem','lib'))")
LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" NVST_BACKEND=nvshmem s coll_nvshmem_2pe 180 var/bin/nvst_coll_tests_nvshmem --np 2
grep -h "FAIL" $R/*.log | head >> $R/summary.txt
(cd $R && tar czf ../r138.tgz ./*.log && rm -f ./*.log)
cat $R/summary.txt
