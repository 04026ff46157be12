"""When does symmetric memory beat NCCL here? The decision guide:

    python -m nvshmem_tutorial.guide --pitfalls      the mistakes it checks, and the error each gives here
    python -m nvshmem_tutorial.guide --analyze [--from PATH]
                                                     the decision tree from the newest measurement of
                                                     two GPUs or more (bench/baselines/*.json by default)
    torchrun --nproc_per_node=N -m nvshmem_tutorial.guide --benchmark [--json FILE] [--max-bytes B] [--budget-s S]
                                                     measure p2p, all_reduce, all_gather, broadcast from
                                                     1 KB to 1 GB: ours, NCCL, torch symmetric memory
                                                     (more ranks than GPUs: a check, not a measurement)

The tree is the crossover sizes of a measurement made on a machine like the
one it is for, not a table of claims from another one.
"""
