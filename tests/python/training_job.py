"""The training patterns on GPUs, one process per rank, launched by
torchrun (test_training_gpu.py starts it; NVST_TEST_SHARE_GPUS=1 lets 2 or
4 ranks share one GPU, torch.distributed then on gloo):

    NVST_TEST_SHARE_GPUS=1 torchrun --nproc_per_node=2 tests/python/training_job.py

Every check of training_checks.py, plus what needs GPU heaps (lock-free
atomics, the parameter cache's peer views). With NVST_NODE_SIZE set the
ranks form logical nodes and reach each other through the proxy: then the
atomic accumulator (which needs load/store reach) is left out and the
hierarchical gradient sync really crosses nodes. Each rank prints PASS/FAIL
per check and "DONE n failure(s)"; the exit status is the failure count.
"""
import os
import sys

import nvshmem_tutorial as nt
import torch
import torch.distributed as dist
import training_checks as tc
from job_checks import Checks, join_torch
from nvshmem_tutorial.structures.parameter_cache import ParameterCache
from nvshmem_tutorial.tensors import via_proxy
from nvshmem_tutorial.training import HybridParameterServer

RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])
DEV = join_torch(int(os.environ.get("LOCAL_RANK", "0")), os.environ.get("NVST_TEST_SHARE_GPUS") == "1")
nt.init_from_torch()
check = Checks(RANK, dist.barrier)

NODES = bool(os.environ.get("NVST_NODE_SIZE"))


def same_node(pe: int) -> bool:
    """Whether pe's heap is mapped here: views need that, reads do not."""
    return not via_proxy(pe)


for kind in ("mlp", "transformer"):
    check(f"GradientSync {kind} equals the reference")(lambda kind=kind: tc.check_gradient_sync(kind))
    check(f"GradientSync {kind} hierarchical")(lambda kind=kind: tc.check_gradient_sync(kind, True))
    check(f"ShardedOptimizer {kind} equals the unsharded optimizer")(
        lambda kind=kind: tc.check_sharded_optimizer(kind))
for k in (0, 2):
    check(f"AsyncGradientServer staleness {k}")(lambda k=k: tc.check_async(k))
check("LockFreeAccumulator deterministic")(lambda: tc.check_lock_free(True))
if not NODES:
    check("LockFreeAccumulator atomic")(lambda: tc.check_lock_free(False))
for sched, chunks in (("1f1b", 1), ("interleaved", 2)):
    if 8 % (WORLD * chunks) == 0:
        check(f"PipelineEngine {sched}")(lambda sched=sched, chunks=chunks: tc.check_pipeline(sched, chunks))
check("tensor parallel MLP")(tc.check_tensor_parallel)


@check("ParameterCache: versions, peer views, a reader never sees a torn update")
def _():
    problems = []  # raised after the collective teardown, so a failure on one rank cannot strand the others
    cache = ParameterCache(1 << 20, 8)
    base = torch.arange(1000, dtype=torch.float32, device=DEV)
    cache.register("w", base + 1000 * RANK)
    peer = (RANK + 1) % WORLD
    near = peer if same_node(peer) else RANK  # reads need a PE of this node; across nodes, the own copy
    if not same_node(peer):
        try:
            cache.read("w", peer)
            problems.append(f"a read of PE {peer} on another node was accepted")
        except ValueError as e:
            if "another node" not in str(e):
                problems.append(f"the refusal of a read across nodes says {e}")

    def version_values(v, rank):  # version 1 is the registered tensor, version i of rank r is all i * 10 + r
        return base + 1000 * rank if v == 1 else torch.full((1000,), float(v * 10 + rank), device=DEV)

    view, v, seq = cache.view("w", near)
    if v != 1 or not torch.equal(view, version_values(1, near)):
        problems.append(f"the first view is version {v} or holds other values")
    dist.barrier()
    for i in range(2, 12):  # the peer updates while this rank reads: a torn read mixes two versions
        cache.update("w", version_values(i, RANK))
        got, gv = cache.read("w", near)
        if not torch.equal(got, version_values(gv, near)):
            problems.append(f"read() returned values that are not version {gv}'s")
    torch.cuda.synchronize()
    dist.barrier()
    got, gv = cache.read("w", near)
    if gv != 11 or not torch.equal(got, version_values(11, near)):
        problems.append(f"after every update the peer's copy reads as version {gv}")
    view, v, seq = cache.view("w", near)
    if not cache.stable("w", near, v, seq):
        problems.append("stable() is False with no update since the view")
    dist.barrier()
    cache.update("w", torch.zeros(1000, device=DEV))  # v + 1: the other slot; the view's slot is intact
    torch.cuda.synchronize()
    dist.barrier()
    if not cache.stable("w", near, v, seq) or not torch.equal(view, version_values(11, near)):
        problems.append("an update to the other slot disturbed the view")
    dist.barrier()
    cache.update("w", torch.ones(1000, device=DEV))  # v + 2: overwrites the view's slot
    torch.cuda.synchronize()
    dist.barrier()
    if cache.stable("w", near, v, seq):
        problems.append("stable() missed an overwrite of the view's slot")
    try:
        cache.register("w", base)
        problems.append("a second registration of the same name was accepted")
    except ValueError:
        pass
    dist.barrier()
    cache.close()
    assert not problems, problems


@check("HybridParameterServer mirrors a parameter for every rank")
def _():
    problems = []
    emb = torch.nn.Embedding(64, 8).to(DEV)
    with torch.no_grad():
        emb.weight.fill_(RANK)
    server = HybridParameterServer(1 << 20)
    server.register_mirror("embedding.weight", emb.weight)
    with torch.no_grad():
        emb.weight.add_(10)
    server.refresh()
    torch.cuda.synchronize()
    dist.barrier()
    for r in filter(same_node, range(WORLD)):  # other nodes' ranks cannot be read (ParameterCache)
        got = server.get_parameter("embedding.weight", r, copy=(r % 2 == 0))
        if not torch.equal(got, torch.full((64, 8), 10.0 + r, device=DEV)):
            problems.append(f"rank {r}'s mirror does not hold its refreshed values")
        if server.version("embedding.weight", r) != 2:
            problems.append(f"rank {r}'s mirror is not at version 2")
    dist.barrier()
    server.close()
    assert not problems, problems


check("bad input fails on every rank with a message")(tc.check_bad_input)
failures = check.done()
dist.destroy_process_group()
sys.exit(failures)
