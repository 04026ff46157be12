# r162 (1x H100, 2 ranks sharing it): nvshmem_tutorial.bench with the NVSHMEM column (nvshmem4py beside our runtime)
# and the shared-GPU mode (NCCL n/a, all-gather checked against gloo); timings are time slices, not a link's
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=$OUT/r162; mkdir -p $R; S=$R/summary.txt; echo "commit $(cat var/pybuild/COMMIT)" > $S
bash scripts/build_python_module.sh var/pybuild python3 > $R/py_module.log 2>&1; echo "py_module rc=$?" >> $S
python3 -m pip install -q --no-deps --target /tmp/nvshmem4py var/wheels312/nvshmem4py*.whl > $R/pip.log 2>&1; echo "pip rc=$?" >> $S
lib=$(python3 -c "import nvidia,os;print(os.path.join(list(nvidia.__path__)[0],'nvshmem','lib'))"); export LD_LIBRARY_PATH=$lib
TR="python3 -m torch.distributed.run --standalone --nproc_per_node=2"
export NVST_TEST_SHARE_GPUS=1
PYTHONPATH=$PWD/var/pybuild/python:/tmp/nvshmem4py timeout 400 $TR -m nvshmem_tutorial.bench -n 5 -w 2 --nvshmem on --json $R/bench_nvshmem.json > $R/bench_nvshmem.log 2>&1; echo "bench with nvshmem4py rc=$?" >> $S
PYTHONPATH=$PWD/var/pybuild/python timeout 300 $TR -m nvshmem_tutorial.bench -n 5 -w 2 > $R/bench_auto_without.log 2>&1; echo "bench without nvshmem4py (auto) rc=$?" >> $S
PYTHONPATH=$PWD/var/pybuild/python timeout 60 $TR -m nvshmem_tutorial.bench --nvshmem on > $R/bench_on_without.log 2>&1; echo "bench --nvshmem on without it rc=$? (want 1)" >> $S
cat $S; for f in bench_nvshmem bench_auto_without; do echo "--- $f"; grep -v "^\[W\|^\[rank\|OMP_NUM\|^\*\*\*" $R/$f.log | tail -24; done; grep -h "nvshmem4py does not" $R/bench_on_without.log | head -2
