"""The seed tutorial's all-gather table (NCCL against ours, 4 KB to 1 GB per
rank), measured by nvshmem_tutorial.bench:

    torchrun --nproc_per_node=N benchmarks/bench_allgather.py [-n ITERS] [--max-bytes B] [--json FILE] ...
"""
import sys

from nvshmem_tutorial.bench import main

if __name__ == "__main__":
    main(["--table", "allgather", *sys.argv[1:]])
