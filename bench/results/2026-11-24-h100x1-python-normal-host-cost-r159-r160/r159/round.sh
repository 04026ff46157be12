# r159 (1x H100): ep.Buffer normal mode from Python: outputs copied out by one C++ call, no torch.cuda.stream contexts; probe old vs new, torch_job.py
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/r159; mkdir -p $R; S=$R/summary.txt; echo "commit $(cat var/pybuild/COMMIT)" > $S
bash scripts/build_python_module.sh var/pybuild python3 > $R/py_module.log 2>&1; echo "py_module rc=$?" >> $S
export PYTHONPATH=$PWD/var/pybuild/python
lib=$(python3 -c "import nvidia,os;print(os.path.join(list(nvidia.__path__)[0],'nvshmem','lib'))"); export LD_LIBRARY_PATH=$lib
TR="python3 -m torch.distributed.run --standalone"
NVST_SYMMETRIC_SIZE=4G timeout 300 $TR --nproc_per_node=1 var/py_normal_probe.py > $R/normal_probe_1pe.log 2>&1; echo "normal_probe rc=$?" >> $S
t() { local name=$1; shift; timeout 200 "$@" > $R/$name.log 2>&1; echo "$name rc=$? $(grep -h DONE $R/$name.log | tr "\n" " ")" >> $S; }
t torch_1pe $TR --nproc_per_node=1 tests/python/torch_job.py
NVST_TEST_SHARE_GPUS=1 t torch_2pe_shared $TR --nproc_per_node=2 tests/python/torch_job.py
NVST_TEST_SHARE_GPUS=1 NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=shm t torch_2pe_internode $TR --nproc_per_node=2 tests/python/torch_job.py
NVST_BACKEND=nvshmem t torch_1pe_nvshmem $TR --nproc_per_node=1 tests/python/torch_job.py
cat $S; grep -v "^\[W" $R/normal_probe_1pe.log | tail -25; grep -h FAIL $R/torch_*.log | head
