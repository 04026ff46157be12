# r151 (1x H100): the count exchange moved into the layout finish_kernel last block (fd_y) against r149s
# separate exchange kernel (fd_x), first_dispatch.cu at one PE alternating twice; the EP suites again
# at 2 PEs, 1+1 over shm and tcp, 2x2; memcheck at 2 PEs; on NVSHMEM at 2 PEs
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NVST_DEVICE_TIMEOUT_S=20 NVST_TIMEOUT_S=60
R=$OUT/r151; mkdir -p $R; echo "commit $(cat var/COMMIT)" > $R/summary.txt
one() { RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$1 timeout 90 "${@:2}"; }
for i in 1 2; do for v in x y; do echo "fd_$v run $i" >> $R/summary.txt; one 29561 var/bin/fd_$v >> $R/summary.txt 2>&1; done; done
s() { local name=$1 t=$2; shift 2; local t0=$SECONDS; timeout -k 5 $t "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'passed|failed|ERROR SUMMARY' $R/$name.log | tail -1)" >> $R/summary.txt; }
export NVST_TEST_SHARE_GPUS=1
s ep_2pe 150 var/bin/nvst_ep_tests --np 2 --stress 1000 --ll-stress 200
NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=shm s ep_1x1_shm 120 var/bin/nvst_ep_tests --np 2 --stress 200 --ll-stress 50
NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER="tcp;ofi_rxm" s ep_1x1_tcp 120 var/bin/nvst_ep_tests --np 2 --stress 100 --ll-stress 20
NVST_NODE_SIZE=2 NVST_FABRIC_PROVIDER=shm s ep_2x2 150 var/bin/nvst_ep_tests --np 4 --stress 100 --ll-stress 20
SAN="compute-sanitizer --target-processes all --error-exitcode 9 --print-limit 20"
s memcheck_ep 200 $SAN --tool memcheck var/bin/nvst_ep_tests --np 2 --stress 3 --ll-stress 2
lib=$(python3 -c "import nvidia,os;print(os.path.join(list(nvidia.__path__)[0],'nvshmem','lib'))")
LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" NVST_BACKEND=nvshmem s ep_nvshmem_2pe 150 var/bin/nvst_ep_tests_nvshmem --np 2 --stress 50 --ll-stress 50
grep -h "FAIL" $R/*.log | head >> $R/summary.txt
(cd $R && tar czf ../r151.tgz ./*.log && rm -f ./*.log && mv ../r151.tgz .)
cat $R/summary.txt
