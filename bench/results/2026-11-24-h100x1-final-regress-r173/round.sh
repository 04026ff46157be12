# r173 (1x H100, PEs sharing it): the session's final commit: device API on one node and at 1+1 (tcp), EP at 2 PEs,
# torch_job.py at 2 sharing and 1+1, the MoE examples at 2
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVST_TEST_SHARE_GPUS=1
R=$OUT/r173; mkdir -p $R; S=$R/summary.txt; echo "commit $(cat var/COMMIT)" > $S
t() { local name=$1 to=$2; shift 2; local t0=$SECONDS; timeout $to "$@" > $R/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'passed|DONE' $R/$name.log | tail -2 | tr '\n' ' ' | cut -c1-120)" >> $S; }
t api_one_node 200 var/bin/nvst_gpu_tests --np 2
NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER="tcp;ofi_rxm" t api_1x1_tcp 200 var/bin/nvst_gpu_tests --np 2
t ep_2pe 200 var/bin/nvst_ep_tests --np 2 --stress 300 --ll-stress 50
bash scripts/build_python_module.sh var/pybuild python3 > $R/py_module.log 2>&1; echo "py_module rc=$?" >> $S
lib=$(python3 -c "import nvidia,os;print(os.path.join(list(nvidia.__path__)[0],'nvshmem','lib'))"); export LD_LIBRARY_PATH=$lib
export PYTHONPATH=$PWD/var/pybuild/python
TR="python3 -m torch.distributed.run --standalone"
t torch_2pe_shared 200 $TR --nproc_per_node=2 tests/python/torch_job.py
NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=shm t torch_1x1 200 $TR --nproc_per_node=2 tests/python/torch_job.py
t moe_training 200 $TR --nproc_per_node=2 examples/moe_training.py
t moe_inference 200 $TR --nproc_per_node=2 examples/moe_inference_ll.py
grep -c PASS $R/moe_*.log >> $S; grep -h FAIL $R/*.log | head -5 >> $S
cd $R && tar czf logs.tgz *.log && rm -f *.log; cat $S
