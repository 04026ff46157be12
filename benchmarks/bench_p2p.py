"""The seed tutorial's point-to-point table (NCCL P2P, CUDA IPC, NVSHMEM and
ours, 16 KB to 1 GB, rank 0 -> rank 1), measured by nvshmem_tutorial.bench:

    torchrun --nproc_per_node=2 benchmarks/bench_p2p.py [-n ITERS] [--json FILE] ...

Across nodes (Type: internode) launch one rank on each of two nodes with
torchrun's --nnodes/--node_rank/--master_addr.
"""
import sys

from nvshmem_tutorial.bench import main

if __name__ == "__main__":
    main(["--table", "p2p", *sys.argv[1:]])
