# r164 (1x H100): the Python package on the NVSHMEM backend with our barriers (r163's change): torch_job.py at 1 rank
# and 2 sharing, nvshmem4py_job.py (NVSHMEM started by nvshmem4py, joined) at 2 sharing
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/r164; mkdir -p $R; S=$R/summary.txt; echo "commit $(cat var/pybuild/COMMIT)" > $S
bash scripts/build_python_module.sh var/pybuild python3 > $R/py_module.log 2>&1; echo "py_module rc=$?" >> $S
python3 -m pip install -q --no-deps --target /tmp/nvshmem4py var/wheels312/nvshmem4py*.whl > $R/pip.log 2>&1; echo "pip rc=$?" >> $S
lib=$(python3 -c "import nvidia,os;print(os.path.join(list(nvidia.__path__)[0],'nvshmem','lib'))"); export LD_LIBRARY_PATH=$lib
export PYTHONPATH=$PWD/var/pybuild/python
TR="python3 -m torch.distributed.run --standalone"
t() { local name=$1; shift; timeout 200 "$@" > $R/$name.log 2>&1; echo "$name rc=$? $(grep -h DONE $R/$name.log | tr "\n" " ")" >> $S; }
NVST_BACKEND=nvshmem t torch_1pe_nvshmem $TR --nproc_per_node=1 tests/python/torch_job.py
NVST_TEST_SHARE_GPUS=1 NVST_BACKEND=nvshmem t torch_2pe_shared_nvshmem $TR --nproc_per_node=2 tests/python/torch_job.py
PYTHONPATH=$PYTHONPATH:/tmp/nvshmem4py NVSHMEM_SYMMETRIC_SIZE=3G NVST_TEST_SHARE_GPUS=1 t nvshmem4py_2pe_shared $TR --nproc_per_node=2 tests/python/nvshmem4py_job.py
cat $S; grep -h FAIL $R/*.log | head
