# r157 (1x H100): r156 again, the probe alone with a 4G heap (r156 ran out: the old and new Buffers were alive at once)
# new (py_ll_probe.py), then torch_job.py (1 rank, 2 sharing, 1+1 logical nodes; ours, and 1 rank on NVSHMEM)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/r157; mkdir -p $R; S=$R/summary.txt; echo "commit $(cat var/pybuild/COMMIT)" > $S
bash scripts/build_python_module.sh var/pybuild python3 > $R/py_module.log 2>&1; echo "py_module rc=$?" >> $S
export PYTHONPATH=$PWD/var/pybuild/python
lib=$(python3 -c "import nvidia,os;print(os.path.join(list(nvidia.__path__)[0],'nvshmem','lib'))"); export LD_LIBRARY_PATH=$lib
TR="python3 -m torch.distributed.run --standalone"
NVST_SYMMETRIC_SIZE=4G timeout 300 $TR --nproc_per_node=1 var/py_ll_probe.py > $R/ll_probe_1pe.log 2>&1; echo "ll_probe rc=$?" >> $S
cat $S; grep -v "^\[W" $R/ll_probe_1pe.log | tail -30
