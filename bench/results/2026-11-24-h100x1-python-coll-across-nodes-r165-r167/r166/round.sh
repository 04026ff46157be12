# r166 (1x H100, ranks sharing it): r165 again after moving the new check below gather_all and modelling the relay's bf16 rounding in the Python combine reference (2x2)
# new torch_job.py check against references from the gathered inputs: 2 sharing, 1+1, 3x1, 2x2 nodes, NVSHMEM 2 sharing
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVST_TEST_SHARE_GPUS=1
R=$OUT/r166; mkdir -p $R; S=$R/summary.txt; echo "commit $(cat var/pybuild/COMMIT)" > $S
bash scripts/build_python_module.sh var/pybuild python3 > $R/py_module.log 2>&1; echo "py_module rc=$?" >> $S
lib=$(python3 -c "import nvidia,os;print(os.path.join(list(nvidia.__path__)[0],'nvshmem','lib'))"); export LD_LIBRARY_PATH=$lib
export PYTHONPATH=$PWD/var/pybuild/python
TR="python3 -m torch.distributed.run --standalone"
t() { local name=$1; shift; local t0=$SECONDS; timeout 280 "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -h DONE $R/$name.log | tr "\n" " ")" >> $S; }
t torch_2pe_shared $TR --nproc_per_node=2 tests/python/torch_job.py
NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=shm t torch_1x1_shm $TR --nproc_per_node=2 tests/python/torch_job.py
NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=shm t torch_3x1_shm $TR --nproc_per_node=3 tests/python/torch_job.py
NVST_NODE_SIZE=2 NVST_FABRIC_PROVIDER=shm t torch_2x2_shm $TR --nproc_per_node=4 tests/python/torch_job.py
NVST_BACKEND=nvshmem t torch_2pe_shared_nvshmem $TR --nproc_per_node=2 tests/python/torch_job.py
cat $S; grep -h "FAIL\|Error" $R/torch_*.log | head -20
