"""The guide's measurement (``--benchmark``): point-to-point, all_reduce,
all_gather and broadcast from 1 KB to 1 GB, ours against NCCL and PyTorch's
symmetric memory where each runs, on the GPUs of this machine.

    torchrun --nproc_per_node=N -m nvshmem_tutorial.guide --benchmark [--json FILE] [--max-bytes B]
                                                                      [--budget-s S]

Each cell is checked once on fresh data (#wrong: elements that differ from
the expected result), then timed: CUDA events around back-to-back calls,
median of 5 runs (the timer of nvshmem_tutorial.bench). Rank 0 prints each
cell as it is measured, with the time since the start. What cannot run here
is said, not guessed: NCCL when ranks share a GPU (it wants one per rank),
point-to-point with one rank, symmetric memory where torch's does not
initialise, and the ops it has no unicast form of (all_gather, broadcast:
its forms there use NVLink multicast, which stays off on shared machines).

Ranks that time-share one GPU (more ranks than GPUs) get a check, not a
measurement: each call waits for time slices, so every cell is checked and
timed with a few calls only, torch's symmetric memory is left out, and the
results name themselves so (one GPU: ``--analyze`` never picks them). The
sizes stop early, agreed by all ranks, once ``--budget-s`` has passed.
"""
from __future__ import annotations

import os
import time
from typing import Callable, Optional

import torch
import torch.distributed as dist

from .analyze import size_name, tree
from .results import document, write_results

SIZES = [1 << (10 + 2 * i) for i in range(11)]  # 1 KB, 4 KB, ..., 1 GB
_GLOO = None


def _timed(fn: Callable[[], object], size: int, quick: bool) -> float:
    """Time per call in microseconds (bench.timed: CUDA events, median of
    runs); ``quick``: one call per run (ranks sharing a GPU)."""
    from .. import bench

    bench.GLOO = _GLOO
    if quick:
        return bench.timed(fn, 1, 1)
    return bench.timed(fn, 20 if size <= 1 << 20 else 10 if size <= 64 << 20 else 3, 2)


def _out_of_time(start: float, budget_s: float) -> bool:
    """Whether any rank has used up the budget (all ranks get the same answer)."""
    late = torch.tensor([1 if time.monotonic() - start > budget_s else 0])
    dist.all_reduce(late, op=dist.ReduceOp.MAX, group=_GLOO)
    return bool(late.item())


def _wrong(got: torch.Tensor, want: torch.Tensor) -> int:
    """Elements that differ, the maximum over ranks."""
    n = torch.tensor([int((got != want).sum().item())])
    dist.all_reduce(n, op=dist.ReduceOp.MAX, group=_GLOO)
    return int(n.item())


def _pattern(count: int, rank: int, dev: torch.device) -> torch.Tensor:
    """Small integers as float32: sums of them are exact."""
    return ((torch.arange(count, device=dev) * 7 + rank * 13) % 61).float()


class _Symm:
    """PyTorch's symmetric memory (torch.distributed._symmetric_memory), unicast forms only."""

    def __init__(self, max_bytes: int, dev: torch.device):
        import torch.distributed._symmetric_memory as symm_mem

        self.mod = symm_mem
        self.group = dist.group.WORLD.group_name
        self.buf = symm_mem.empty(max_bytes // 4, dtype=torch.float32, device=dev)
        self.handle = symm_mem.rendezvous(self.buf, self.group)

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        b = self.buf[: x.numel()]
        b.copy_(x)
        return torch.ops.symm_mem.one_shot_all_reduce(b, "sum", self.group)

    def peer(self, pe: int, count: int) -> torch.Tensor:
        return self.handle.get_buffer(pe, (count,), torch.float32)


def _row(op: str, impl: str, size: int, time_us: float, wrong: int, busbw_factor: float) -> dict:
    algbw = size / time_us / 1e3 if time_us > 0 else 0.0
    return {"op": op, "impl": impl, "bytes": size, "time_us": time_us, "algbw_gbps": algbw,
            "busbw_gbps": algbw * busbw_factor, "wrong": wrong}


def run(json_path: Optional[str], max_bytes: int, budget_s: float) -> int:
    """Measures, prints the table and the tree (rank 0) and writes the JSON.

    Arguments:
        json_path: where rank 0 writes the results (default
            nvshmem_guide_<gpu>-x<N>.json here).
        max_bytes: the largest size measured.
        budget_s: no new size starts once this many seconds have passed.

    Returns:
        0, or 77 where there is no GPU.
    """
    global _GLOO
    start = time.monotonic()
    os.environ.setdefault("NVST_SYMMETRIC_SIZE", str(max(1 << 30, 3 * max_bytes)))  # our workspace at 1 GB
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    gpus = torch.cuda.device_count()
    if gpus == 0:
        print("nvshmem_tutorial.guide --benchmark: no GPU here; --analyze reads a measurement made elsewhere")
        return 77
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % gpus)
    torch.cuda.set_device(dev)
    shared = world > gpus
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    if shared:
        dist.init_process_group("gloo", rank=rank, world_size=world)
    else:
        dist.init_process_group("nccl", rank=rank, world_size=world, device_id=dev)
    _GLOO = dist.new_group(backend="gloo")
    import nvshmem_tutorial as nt
    import nvshmem_tutorial.distributed as nd

    nt.init_from_torch()
    skipped = []
    if shared:
        skipped.append("NCCL: the ranks share a GPU (NCCL wants one GPU per rank)")
        skipped.append("timing: the ranks time-share a GPU, so every call waits for time slices; each cell is "
                       "checked and timed with one call per run (a check, not a measurement)")
    if world < 2:
        skipped.append("point-to-point: one rank")
    symm = None
    if shared:
        skipped.append("torch symmetric memory: the ranks share a GPU (not checked there)")
    else:
        try:
            symm = _Symm(max_bytes, dev)
        except Exception as e:  # any failure to set it up means: not available here
            skipped.append(f"torch symmetric memory: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
        skipped.append("torch symmetric memory all_gather and broadcast: its forms use NVLink multicast, off here")
    sizes = [s for s in SIZES if s <= max_bytes]
    if max_bytes < SIZES[-1]:
        skipped.append(f"sizes above {size_name(max_bytes)} (--max-bytes)")
    rows: list[dict] = []

    def add(op: str, impl: str, size: int, time_us: float, wrong: int, busbw_factor: float) -> None:
        rows.append(_row(op, impl, size, time_us, wrong, busbw_factor))
        if rank == 0:
            bad = f"  #wrong {wrong}" if wrong else ""
            print(f"# {time.monotonic() - start:6.1f} s  {size_name(size):>6} {op:<10} {impl:<10} "
                  f"{time_us:10.1f} us{bad}", flush=True)

    ar_bus, ag_bus = 2 * (world - 1) / world, (world - 1) / world
    sym_dst = nt.alloc_tensor((max_bytes // 4,), torch.float32)
    symm_all_reduce = True
    if rank == 0:
        print(f"# {world} rank(s) on {gpus} GPU(s), {size_name(sizes[0])} .. {size_name(sizes[-1])}, "
              f"budget {budget_s:.0f} s", flush=True)
    for size in sizes:
        if _out_of_time(start, budget_s):
            skipped.append(f"sizes from {size_name(size)} up: the time budget ran out (--budget-s {budget_s:.0f})")
            break
        count = size // 4
        x = _pattern(count, rank, dev)
        sum_all = sum(_pattern(count, r, dev) for r in range(world))
        # all_reduce
        impls: dict[str, Callable[..., object]] = {"nvst": lambda t: nd.all_reduce(t)}
        if not shared:
            impls["nccl"] = lambda t: dist.all_reduce(t)
        for impl, call in impls.items():
            t = x.clone()
            call(t)
            wrong = _wrong(t, sum_all)
            add("all_reduce", impl, size, _timed(lambda: call(t), size, shared), wrong, ar_bus)
        if symm is not None and symm_all_reduce:
            try:
                wrong = _wrong(symm.all_reduce(x), sum_all)
                add("all_reduce", "torch_symm", size, _timed(lambda: symm.all_reduce(x), size, shared), wrong,
                    ar_bus)
            except RuntimeError as e:  # torch's one-shot form has size limits of its own
                symm_all_reduce = False
                why = str(e).splitlines()[0][:160]
                skipped.append(f"torch symmetric memory all_reduce from {size_name(size)}: {why}")
        # all_gather (size = the output, as nccl-tests)
        if count % world == 0:
            part = _pattern(count // world, rank, dev)
            want = torch.cat([_pattern(count // world, r, dev) for r in range(world)])
            out = torch.empty(count, device=dev)
            gathers: dict[str, Callable[..., object]] = {"nvst": lambda: nd.all_gather_into_tensor(out, part)}
            if not shared:
                gathers["nccl"] = lambda: dist.all_gather_into_tensor(out, part)
            for impl, call in gathers.items():
                out.fill_(-1)
                call()
                wrong = _wrong(out, want)
                add("all_gather", impl, size, _timed(call, size, shared), wrong, ag_bus)
        # broadcast from rank 0
        bcasts: dict[str, Callable[..., object]] = {"nvst": lambda t: nd.broadcast(t, 0)}
        if not shared:
            bcasts["nccl"] = lambda t: dist.broadcast(t, 0)
        for impl, call in bcasts.items():
            t = x.clone()
            call(t)
            wrong = _wrong(t, _pattern(count, 0, dev))
            add("broadcast", impl, size, _timed(lambda: call(t), size, shared), wrong, 1.0)
        # point-to-point, rank 0 -> rank 1
        if world >= 2:
            src = _pattern(count, 0, dev)
            dst = sym_dst[:count]
            p2p: dict[str, Callable[..., object]] = {
                "nvst": lambda: nt.put_tensor_async(dst, src, 1) if rank == 0 else None}
            if not shared:
                p2p["nccl"] = lambda: (dist.send(src, 1) if rank == 0 else dist.recv(dst, 0) if rank == 1 else None)
            if symm is not None:
                p2p["torch_symm"] = lambda: symm.peer(1, count).copy_(src) if rank == 0 else None
            for impl, call in p2p.items():
                landed = symm.buf[:count] if impl == "torch_symm" and symm is not None else dst
                landed.fill_(-1)
                dist.barrier(group=_GLOO)
                call()
                torch.cuda.synchronize()
                dist.barrier(group=_GLOO)
                wrong = _wrong(landed, src) if rank == 1 else _wrong(src, src)
                add("p2p", impl, size, _timed(call, size, shared), wrong, 1.0)
    nt.nvshmem_free_tensor(sym_dst)
    if rank == 0:
        used = min(world, gpus)  # the GPUs the ranks ran on, not every one visible
        _print(rows, world, used, skipped)
        doc = document(rows, [torch.cuda.get_device_name(i) for i in range(used)],
                       {"torch": torch.__version__, "nccl": ".".join(map(str, torch.cuda.nccl.version())),
                        "cuda_runtime": torch.version.cuda, "nvshmem": None},
                       f"nvshmem_tutorial.guide --benchmark, {world} ranks on {used} GPU(s)"
                       + (" (time-shared: a check, not a measurement)" if shared else ""),
                       [f"skipped: {s}" for s in skipped])
        for line in tree(doc):
            print(line)
        path = json_path or f"nvshmem_guide_{torch.cuda.get_device_name().replace(' ', '_')}-x{used}.json"
        write_results(path, doc)
    dist.barrier(group=_GLOO)
    nt.finalize()
    dist.destroy_process_group()
    return 0


def _print(rows: list[dict], world: int, gpus: int, skipped: list[str]) -> None:
    print(f"# {world} ranks on {gpus} GPU(s); time per call in us (#wrong in brackets where not 0)")
    for op in ("p2p", "all_reduce", "all_gather", "broadcast"):
        mine = [r for r in rows if r["op"] == op]
        if not mine:
            continue
        impls = sorted({r["impl"] for r in mine})
        print(f"\n{op:>12} " + "".join(f"{i:>14}" for i in impls))
        for size in sorted({r["bytes"] for r in mine}):
            cells = []
            for i in impls:
                r = next((r for r in mine if r["impl"] == i and r["bytes"] == size), None)
                cells.append("-" if r is None else f"{r['time_us']:.1f}" + (f" [{r['wrong']}]" if r["wrong"] else ""))
            print(f"{size_name(size):>12} " + "".join(f"{c:>14}" for c in cells))
    print()
    for s in skipped:
        print(f"# skipped: {s}")
