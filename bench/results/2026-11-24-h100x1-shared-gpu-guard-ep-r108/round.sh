# r108 (1x H100): bench ep / coll on a shared GPU say why they cannot run; the EP suite across logical nodes and the fabric host tests after the proxy changes
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NVST_DEVICE_TIMEOUT_S=20 NVST_TIMEOUT_S=60 NVST_TEST_SHARE_GPUS=1
R=$OUT/r108; mkdir -p $R
echo "commit $(cat var/COMMIT) cores $(nproc)" > $R/summary.txt
s() { local name=$1 t=$2; shift 2; local t0=$SECONDS; timeout -k 5 $t "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'passed|failed|refuses|n/a|not run' $R/$name.log | tail -1 | cut -c1-300)" >> $R/summary.txt; }
s bench_ep_shared 120 var/bin/nvst bench ep --np 2
s bench_coll_shared 120 var/bin/nvst bench coll --np 2 -b 1K -e 4K
NVST_NODE_SIZE=1 s bench_p2p_shared 120 var/bin/nvst bench p2p --np 2 -b 4K -e 64K -f 4
s host_fabric 200 build/tests/host/nvst_host_tests --gtest_filter='Paths/Fabric.*:FabricSetup.*:InboxBell.*:ProxyFifo.*'
OUT=$R/ep EP_STRESS=200 bash scripts/device_round.sh var/bin shared-ep-hier > /dev/null 2>&1; cat $R/ep/summary.txt >> $R/summary.txt
cd $R && tar czf ../r108.tgz . && cd .. && rm -rf r108/*.log r108/ep
