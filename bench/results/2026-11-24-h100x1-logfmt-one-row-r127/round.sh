# r127 (1x H100): what one LogFMT row encode costs (logfmt_probe.cu), default and fast-math builds
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/r127; mkdir -p $R; echo "commit $(cat var/COMMIT)" > $R/summary.txt
for b in logfmt_probe logfmt_probe_fast; do echo "$b" >> $R/summary.txt; timeout 60 var/bin/$b >> $R/summary.txt 2>&1; done
cat $R/summary.txt
