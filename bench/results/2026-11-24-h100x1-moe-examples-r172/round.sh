# r172 (1x H100, ranks sharing it): the new MoE examples (training with autograd through dispatch/combine; low-latency
# inference with overlapped micro-batches and a CUDA graph), each checking itself against a dense layer
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/r172; mkdir -p $R; S=$R/summary.txt; echo "commit $(cat var/pybuild/COMMIT)" > $S
bash scripts/build_python_module.sh var/pybuild python3 > $R/py_module.log 2>&1; echo "py_module rc=$?" >> $S
lib=$(python3 -c "import nvidia,os;print(os.path.join(list(nvidia.__path__)[0],'nvshmem','lib'))"); export LD_LIBRARY_PATH=$lib
export PYTHONPATH=$PWD/var/pybuild/python
TR="python3 -m torch.distributed.run --standalone"
t() { local name=$1; shift; local t0=$SECONDS; timeout 200 "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -c PASS $R/$name.log) PASS $(grep -c FAIL $R/$name.log) FAIL" >> $S; }
t training_2 $TR --nproc_per_node=2 examples/moe_training.py
t inference_2 $TR --nproc_per_node=2 examples/moe_inference_ll.py
NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=shm t training_1x1 $TR --nproc_per_node=2 examples/moe_training.py
NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=shm t inference_1x1 $TR --nproc_per_node=2 examples/moe_inference_ll.py
t training_1 $TR --nproc_per_node=1 examples/moe_training.py
cat $S; grep -h "PASS\|FAIL\|Error\|error" $R/training_2.log $R/inference_2.log | grep -v "^\[W" | head -30
