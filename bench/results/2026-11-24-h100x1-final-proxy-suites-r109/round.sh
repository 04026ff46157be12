# r109 (1x H100): the final build across logical nodes: collectives (one node and 1+1), device API, EP hier
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/r109; mkdir -p $R
OUT=$R/check bash scripts/device_round.sh var/bin shared-check > $R/check.out 2>&1
OUT=$R/proxy bash scripts/device_round.sh var/bin shared-proxy > $R/proxy.out 2>&1
{ cat $R/check/summary.txt; cat $R/proxy/summary.txt; } > $R/summary.txt
cd $R && tar czf ../r109.tgz . && cd .. && rm -rf r109/check r109/proxy r109/*.out
