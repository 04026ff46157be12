# r154 (1x H100): host cost of a small tensor put from Python, old path vs new (raw stream, one-expression checks);
# then torch_job.py (1 rank, 2 sharing; ours and NVSHMEM) on the new tensors.py
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/r154; mkdir -p $R; S=$R/summary.txt; echo "commit $(cat var/pybuild/COMMIT)" > $S
bash scripts/build_python_module.sh var/pybuild python3 > $R/py_module.log 2>&1; echo "py_module rc=$?" >> $S
export PYTHONPATH=$PWD/var/pybuild/python
lib=$(python3 -c "import nvidia,os;print(os.path.join(list(nvidia.__path__)[0],'nvshmem','lib'))"); export LD_LIBRARY_PATH=$lib
TR="python3 -m torch.distributed.run --standalone"
timeout 200 $TR --nproc_per_node=1 var/py_put_probe.py > $R/probe_1pe.log 2>&1; echo "probe_1pe rc=$?" >> $S
NVST_TEST_SHARE_GPUS=1 timeout 200 $TR --nproc_per_node=2 var/py_put_probe.py > $R/probe_2pe_shared.log 2>&1; echo "probe_2pe rc=$?" >> $S
timeout 200 $TR --nproc_per_node=1 tests/python/torch_job.py > $R/torch_1pe.log 2>&1; echo "torch_1pe rc=$? $(grep -c PASS $R/torch_1pe.log) PASS $(grep -c FAIL $R/torch_1pe.log) FAIL" >> $S
NVST_TEST_SHARE_GPUS=1 timeout 200 $TR --nproc_per_node=2 tests/python/torch_job.py > $R/torch_2pe_shared.log 2>&1; echo "torch_2pe_shared rc=$? $(grep -c PASS $R/torch_2pe_shared.log) PASS $(grep -c FAIL $R/torch_2pe_shared.log) FAIL" >> $S
NVST_BACKEND=nvshmem timeout 200 $TR --nproc_per_node=1 tests/python/torch_job.py > $R/torch_1pe_nvshmem.log 2>&1; echo "torch_1pe_nvshmem rc=$? $(grep -c PASS $R/torch_1pe_nvshmem.log) PASS $(grep -c FAIL $R/torch_1pe_nvshmem.log) FAIL" >> $S
cat $S; grep -v "^\[W" $R/probe_1pe.log | tail -50; grep -v "^\[W" $R/probe_2pe_shared.log | grep -v "^$" | tail -40
