# r134 (1x H100): combine receive at two blocks an SM; EP suites on both backends and the Python package (shared GPU)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NVST_DEVICE_TIMEOUT_S=20 NVST_TIMEOUT_S=60
R=$OUT/r134; mkdir -p $R; echo "commit $(cat var/COMMIT)" > $R/summary.txt
one() { RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$1 timeout 120 "${@:2}"; }
echo "new" >> $R/summary.txt; one 29522 var/bin/ll_phases_new >> $R/summary.txt 2>&1
s() { local name=$1 t=$2; shift 2; local t0=$SECONDS; timeout -k 5 $t "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'passed|failed' $R/$name.log | tail -1)" >> $R/summary.txt; }
NVST_TEST_SHARE_GPUS=1 s ep_2pe 200 var/bin/nvst_ep_tests --np 2 --stress 100 --ll-stress 1000
NVST_TEST_SHARE_GPUS=1 NVST_NODE_SIZE=2 s ep_2x2 200 var/bin/nvst_ep_tests --np 4 --stress 50 --ll-stress 200
lib=$(python3 -c "import nvidia,os;print(os.path.join(list(nvidia.__path__)[0],'nvshmem','lib'))")
LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" NVST_TEST_SHARE_GPUS=1 NVST_BACKEND=nvshmem s ep_nvshmem_2pe 200 var/bin/nvst_ep_tests_nvshmem --np 2 --stress 50 --ll-stress 200
grep -h FAIL $R/*.log | head >> $R/summary.txt
(cd $R && tar czf ../r134.tgz ./*.log && rm -f ./*.log)
OUT=$OUT/r134torch timeout 300 bash scripts/device_round.sh var/pybuild/bin shared-torch-nvshmem >/dev/null 2>&1; echo "torch rc=$?" >> $R/summary.txt; cat $OUT/r134torch/summary.txt >> $R/summary.txt 2>/dev/null
cat $R/summary.txt
