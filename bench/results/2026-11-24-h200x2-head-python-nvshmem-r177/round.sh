# r177 (2x H200): the Python package at HEAD on two real GPUs (pytest suite: torch_job at 1 and 2 ranks, the MoE
# examples; torch_job across 1+1 logical nodes; the quickstart; the seed's two tables with the NVSHMEM column through
# nvshmem4py; nvshmem4py joined), the NVSHMEM backend's suites (device API, collectives, EP, bench ep), then
# compute-sanitizer on two GPUs (device API, collectives, EP memcheck; EP racecheck)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NVST_DEVICE_TIMEOUT_S=20 NVST_TIMEOUT_S=60 PYTHONUNBUFFERED=1
DEADLINE=$((SECONDS + ${BUDGET:-575}))
R=$OUT/r177; mkdir -p $R; S=$R/summary.txt
python3 -c "import tarfile; tarfile.open('var/carry/bins.tar.xz').extractall('var/bin'); tarfile.open('var/carry/pybuild.tar.xz').extractall('var')" || exit 3
echo "commit $(cat var/COMMIT) $(nvidia-smi -L | wc -l) GPUs; torch $(python3 -c 'import torch;print(torch.__version__)')" > $S
t() { local name=$1 to=$2; shift 2; local rem=$((DEADLINE - SECONDS)); [ $rem -lt 20 ] && { echo "$name skipped: out of time" >> $S; return; }
      [ $to -gt $rem ] && to=$rem; local t0=$SECONDS; timeout -k 5 $to "$@" > $R/$name.log 2>&1
      echo "$name rc=$? $((SECONDS-t0))s $(grep -E 'passed|failed|ERROR SUMMARY|DONE' $R/$name.log | tail -1 | cut -c1-110)" >> $S; }
B=var/bin
t py_module 120 bash scripts/build_python_module.sh var/pybuild python3
t pip_nvshmem4py 60 python3 -m pip install -q --no-deps --target /tmp/nvshmem4py var/wheels312/nvshmem4py*.whl
export LD_LIBRARY_PATH=$(python3 -c "import nvidia,os;print(os.path.join(list(nvidia.__path__)[0],'nvshmem','lib'))")
export PYTHONPATH=$PWD/var/pybuild/python
TR="python3 -m torch.distributed.run --standalone"
t pytest 240 python3 -m pytest -v -p no:cacheprovider tests/python
NVST_NODE_SIZE=1 NVST_FABRIC_PROVIDER=shm t torch_1x1_shm 120 $TR --nproc_per_node=2 tests/python/torch_job.py
t quickstart 60 $TR --nproc_per_node=2 examples/torch_quickstart.py
PYTHONPATH=$PYTHONPATH:/tmp/nvshmem4py t torch_bench 200 $TR --nproc_per_node=2 -m nvshmem_tutorial.bench --nvshmem on --json $R/torch_bench.json
PYTHONPATH=$PYTHONPATH:/tmp/nvshmem4py NVSHMEM_SYMMETRIC_SIZE=3G t nvshmem4py_2pe 90 $TR --nproc_per_node=2 tests/python/nvshmem4py_job.py
NVST_BACKEND=nvshmem t torch_2pe_nvshmem 90 $TR --nproc_per_node=2 tests/python/torch_job.py
NVST_BACKEND=nvshmem t api_nvshmem_2pe 90 $B/nvst_gpu_tests_nvshmem --np 2
NVST_BACKEND=nvshmem t coll_nvshmem_2pe 150 $B/nvst_coll_tests_nvshmem --np 2
NVST_BACKEND=nvshmem t ep_nvshmem_2pe 150 $B/nvst_ep_tests_nvshmem --np 2 --stress 1000 --ll-stress 100
t bench_ep_nvshmem 120 $B/nvst_nvshmem bench ep --json $R/ep_nvshmem.json
SAN="env NVST_TEST_SANITIZER=1 compute-sanitizer --target-processes all --error-exitcode 9 --print-limit 20"
t memcheck_api 120 $SAN --tool memcheck $B/nvst_gpu_tests --np 2 --rounds 1
t memcheck_ep 120 $SAN --tool memcheck $B/nvst_ep_tests --np 2 --stress 20
t memcheck_coll 120 $SAN --tool memcheck $B/nvst_coll_tests --np 2
t racecheck_ep 150 $SAN --tool racecheck $B/nvst_ep_tests --np 2 --stress 5
cd $R && tar czf results.tgz *.log *.json && rm -f *.log *.json
cat $S
