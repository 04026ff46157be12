# r160 (1x H100): r159 probe again with old and new alternated call by call, two passes per shape (r159 saw new slower at T=4096 only)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/r160; mkdir -p $R; S=$R/summary.txt; echo "commit $(cat var/pybuild/COMMIT)" > $S
bash scripts/build_python_module.sh var/pybuild python3 > $R/py_module.log 2>&1; echo "py_module rc=$?" >> $S
export PYTHONPATH=$PWD/var/pybuild/python
lib=$(python3 -c "import nvidia,os;print(os.path.join(list(nvidia.__path__)[0],'nvshmem','lib'))"); export LD_LIBRARY_PATH=$lib
TR="python3 -m torch.distributed.run --standalone"
NVST_SYMMETRIC_SIZE=4G timeout 300 $TR --nproc_per_node=1 var/py_normal_probe.py > $R/normal_probe_1pe.log 2>&1; echo "normal_probe rc=$?" >> $S
t() { local name=$1; shift; timeout 200 "$@" > $R/$name.log 2>&1; echo "$name rc=$? $(grep -h DONE $R/$name.log | tr "\n" " ")" >> $S; }
cat $S; grep -v "^\[W" $R/normal_probe_1pe.log | tail -30
