"""The seed tutorial's two tables, measured from PyTorch:

    torchrun --nproc_per_node=2 -m nvshmem_tutorial.bench [--json FILE] [-n ITERS] [-w WARMUP]
                          [--nvshmem auto|on|off] [--table p2p|allgather|both] [--max-bytes N]

(benchmarks/bench_p2p.py and benchmarks/bench_allgather.py run one table each.)

P2P (rank 0 -> rank 1, one direction): NCCL send/recv (torch.distributed),
CUDA IPC (torch's own IPC handle of rank 1's tensor, opened on rank 0,
copied into with copy_), NVSHMEM (nvshmem4py's put between its own
symmetric tensors, where nvshmem4py is installed: NVSHMEM runs beside our
runtime, each with its own heap), and ours (put_tensor_async into a
symmetric tensor). All-gather: NCCL's all_gather_into_tensor against ours
(nvshmem_tutorial.distributed). Every row is checked: the receiver compares
the bytes with what was sent (#wrong). Times are CUDA events around ITERS
back-to-back operations after WARMUP, the median of 5 such runs; GB/s =
bytes / time (all-gather: busbw as nccl-tests).

With NVST_TEST_SHARE_GPUS=1 the ranks share one GPU: NCCL refuses that, so
its columns read n/a and the all-gather is checked against a gather over
gloo. Timings there are the GPU's time slices, not a link's: that mode is
for checking that every column runs and is right.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch.multiprocessing.reductions import reduce_tensor

import nvshmem_tutorial as nt
import nvshmem_tutorial.distributed as nd

P2P_SIZES = [16 << 10, 256 << 10, 1 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30]
AG_SIZES = [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 2 << 20, 4 << 20, 8 << 20, 16 << 20, 32 << 20,
            64 << 20, 128 << 20, 256 << 20, 512 << 20, 1 << 30]  # the seed's all-gather sizes


def kind() -> str:
    """The seed's Type column: whether the ranks share one node."""
    return "intranode" if nt.team_n_pes(nt.TEAM_NODE) == nt.n_pes() else "internode"


Row = dict[str, Any]  # one JSON row of --json


def say(line: str) -> None:
    """Prints `line` on rank 0 only.

    Arguments:
        line: the text.
    """
    if dist.get_rank() == 0:
        print(line)


def size_name(b: int) -> str:
    """A byte count as the tables show it.

    Arguments:
        b: bytes.

    Returns:
        "16 KB", "256 MB", "1 GB", ...
    """
    return f"{b >> 30} GB" if b >= 1 << 30 else f"{b >> 20} MB" if b >= 1 << 20 else f"{b >> 10} KB"


def timed(fn: Callable[[], Any], iters: int, warmup: int) -> float:
    """Median over 5 runs of the per-operation time in microseconds.

    Arguments:
        fn: one operation, queued on the current stream (collective: every
            rank calls timed() at the same point).
        iters: operations per run, back to back.
        warmup: untimed operations first.

    Returns:
        Microseconds per operation, the median of the 5 runs.
    """
    for _ in range(warmup):
        fn()
    runs = []
    for _ in range(5):
        dist.barrier(group=GLOO)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        runs.append(start.elapsed_time(end) * 1000.0 / iters)
    dist.barrier(group=GLOO)
    return statistics.median(runs)


def count_wrong(got: torch.Tensor, want: torch.Tensor) -> int:
    """Bytes that differ, agreed by every rank (max).

    Arguments:
        got: what arrived.
        want: what was sent (the same size).

    Returns:
        The largest count of differing bytes over the ranks.
    """
    n = torch.tensor([int((got.view(torch.uint8) != want.view(torch.uint8)).sum().item())])
    dist.all_reduce(n, op=dist.ReduceOp.MAX, group=GLOO)
    return int(n.item())


def ipc_view_of(tensor: torch.Tensor, owner_rank: int) -> torch.Tensor | None:
    """Rank 0's view of owner_rank's tensor through torch's CUDA IPC handle.

    Arguments:
        tensor: the tensor, on owner_rank (ignored elsewhere).
        owner_rank: the rank that owns it.

    Returns:
        The view on every other rank; None on owner_rank.
    """
    handle: list[Any] = [reduce_tensor(tensor) if dist.get_rank() == owner_rank else None]
    dist.broadcast_object_list(handle, src=owner_rank, group=GLOO)
    if dist.get_rank() == owner_rank:
        return None
    rebuild, args = handle[0]
    args = list(args)
    args[6] = torch.cuda.current_device()  # open it on this process's GPU
    return rebuild(*args)


def ratio(t: dict[str, float], a: str, b: str) -> str:
    """GB/s of a over b as '1.23x', or n/a where either column did not run.

    Arguments:
        t: GB/s by column.
        a: the numerator's column.
        b: the denominator's column.

    Returns:
        The cell's text, 9 characters wide.
    """
    return f"{t[a] / t[b]:8.2f}x" if a in t and b in t else f"{'n/a':>9}"


def p2p_table(iters: int, warmup: int, rows: list[Row], nvshmem: Any, max_bytes: int) -> None:
    """Measures and prints the P2P table (collective over every rank).

    Arguments:
        iters: operations per timed run.
        warmup: untimed operations first.
        rows: the JSON rows; one is appended per size.
        nvshmem: nvshmem.core for the NVSHMEM column, or None.
        max_bytes: the largest size measured.
    """
    rank, dev = dist.get_rank(), torch.cuda.current_device()
    say("# P2P, rank 0 -> rank 1 (one direction), GB/s; #wrong counts bytes")
    say(f"{'type':>9} {'size':>8} {'NCCL':>9} {'CUDA IPC':>9} {'NVSHMEM':>9} {'ours':>9} {'ours/NCCL':>9} "
        f"{'ours/IPC':>9} {'ours/NVSH':>9} {'#wrong':>7}")
    for nbytes in [b for b in P2P_SIZES if b <= max_bytes]:
        n = nbytes // 2
        g = torch.Generator(device="cpu").manual_seed(nbytes)
        # Random bf16 bit patterns (NCCL moves no int16); compared as bytes.
        src = torch.randint(-30000, 30000, (n,), generator=g, dtype=torch.int16).view(torch.bfloat16).to(dev)
        dst = torch.full((n,), -1, dtype=torch.bfloat16, device=dev)
        sym = nt.alloc_tensor((n,), torch.bfloat16)
        t, wrong = {}, 0
        if not SHARED:  # NCCL: rank 0 sends, rank 1 receives.
            t["nccl"] = timed(lambda: dist.send(src, 1) if rank == 0 else dist.recv(dst, 0) if rank == 1 else None,
                              iters, warmup)
            wrong = count_wrong(dst, src) if rank == 1 else count_wrong(src, src)
        # CUDA IPC: rank 0 copies into rank 1's tensor, opened through torch's IPC handle.
        dst.fill_(-1)
        torch.cuda.synchronize()
        peer = ipc_view_of(dst, 1)
        t["ipc"] = timed(lambda: peer.copy_(src) if rank == 0 and peer is not None else None, iters, warmup)
        wrong = max(wrong, count_wrong(dst, src) if rank == 1 else count_wrong(src, src))
        peer = None  # closes the IPC mapping
        if nvshmem is not None:  # NVSHMEM: nvshmem4py's put, between its own symmetric tensors
            nv_src = nvshmem.tensor((n,), dtype=torch.bfloat16)
            nv_dst = nvshmem.tensor((n,), dtype=torch.bfloat16)
            nv_src.copy_(src)
            nv_dst.fill_(-1)
            stream = torch.cuda.current_stream()
            torch.cuda.synchronize()
            t["nvshmem"] = timed(lambda: nvshmem.put(nv_dst, nv_src, remote_pe=1, stream=stream) if rank == 0
                                 else None, iters, warmup)
            wrong = max(wrong, count_wrong(nv_dst, src) if rank == 1 else count_wrong(src, src))
            nvshmem.free_tensor(nv_src)
            nvshmem.free_tensor(nv_dst)
        # Ours: a put into rank 1's symmetric tensor.
        t["ours"] = timed(lambda: nt.put_tensor_async(sym, src, 1) if rank == 0 else None, iters, warmup)
        wrong = max(wrong, count_wrong(sym, src) if rank == 1 else count_wrong(src, src))
        nt.nvshmem_free_tensor(sym)
        gbps = {k: nbytes / v / 1e3 for k, v in t.items()}
        cols = " ".join(f"{gbps[k]:9.2f}" if k in gbps else f"{'n/a':>9}" for k in ("nccl", "ipc", "nvshmem", "ours"))
        say(f"{kind():>9} {size_name(nbytes):>8} {cols} {ratio(gbps, 'ours', 'nccl')} {ratio(gbps, 'ours', 'ipc')} "
            f"{ratio(gbps, 'ours', 'nvshmem')} {wrong:7d}")
        rows.append({"table": "p2p", "bytes": nbytes, "us": t, "gbps": gbps, "wrong": wrong})
    if SHARED:
        say("# NCCL: n/a (the ranks share a GPU, which NCCL refuses)")
    if nvshmem is None:
        say("# NVSHMEM: n/a (nvshmem4py is not installed here, or --nvshmem off; "
            "`nvst bench p2p` has NVSHMEM's column)")


def allgather_table(iters: int, warmup: int, rows: list[Row], max_bytes: int) -> None:
    """Measures and prints the all-gather table (collective over every rank).

    Arguments:
        iters: operations per timed run.
        warmup: untimed operations first.
        rows: the JSON rows; one is appended per size.
        max_bytes: the largest size measured.
    """
    world, dev = dist.get_world_size(), torch.cuda.current_device()
    say(f"# all-gather over {world} ranks; size = bytes per rank; busbw GB/s as nccl-tests")
    say(f"{'type':>9} {'size':>8} {'NCCL us':>9} {'NCCL bw':>9} {'ours us':>9} {'ours bw':>9} {'speed-up':>9} "
        f"{'#wrong':>7}")
    bus = lambda nbytes, us: world * nbytes / us / 1e3 * (world - 1) / world  # noqa: E731
    for nbytes in [b for b in AG_SIZES if b <= max_bytes]:
        n = nbytes // 4
        g = torch.Generator(device="cpu").manual_seed(nbytes + dist.get_rank())
        x = torch.rand((n,), generator=g).to(dev)
        out = torch.full((world * n,), -1.0, device=dev)
        t = {}
        if SHARED:  # the reference gathered over gloo
            parts = [torch.empty(n) for _ in range(world)]
            dist.all_gather(parts, x.cpu(), group=GLOO)
            ref = torch.cat(parts).to(dev)
        else:
            ref = torch.empty((world * n,), device=dev)
            t["nccl"] = timed(lambda: dist.all_gather_into_tensor(ref, x), iters, warmup)
        t["ours"] = timed(lambda: nd.all_gather_into_tensor(out, x), iters, warmup)
        wrong = count_wrong(out, ref)
        nccl = (f"{t['nccl']:9.1f} {bus(nbytes, t['nccl']):9.2f}" if "nccl" in t else f"{'n/a':>9} {'n/a':>9}")
        speed = f"{t['nccl'] / t['ours']:8.2f}x" if "nccl" in t else f"{'n/a':>9}"
        ours = t["ours"]
        say(f"{kind():>9} {size_name(nbytes):>8} {nccl} {ours:9.1f} {bus(nbytes, ours):9.2f} {speed} {wrong:7d}")
        rows.append({"table": "allgather", "bytes": nbytes, "us": t,
                     "busbw": {k: bus(nbytes, v) for k, v in t.items()}, "wrong": wrong})


def start_nvshmem4py(mode: str, local: int) -> Any:
    """NVSHMEM through nvshmem4py, for the P2P table's NVSHMEM column.

    Rank 0's unique ID travels over gloo.

    Arguments:
        mode: "on" (exit if nvshmem4py does not import), "auto" (use it
            where it imports) or "off".
        local: this rank's GPU.

    Returns:
        nvshmem.core, initialised; or None.
    """
    if mode == "off":
        return None
    try:
        import numpy as np
        import nvshmem.core as nvshmem
        from cuda.core import Device
    except ImportError as e:
        if mode == "on":
            sys.exit(f"nvshmem_tutorial.bench: --nvshmem on, but nvshmem4py does not import ({e}); "
                     "pip install nvshmem4py-cu13")
        return None
    # The 1 GB row's two tensors, in NVSHMEM's own heap.
    os.environ.setdefault("NVSHMEM_SYMMETRIC_SIZE", str(3 << 30))
    device = Device(local)
    device.set_current()
    rank = dist.get_rank()
    uid = nvshmem.get_unique_id(empty=rank != 0)
    uid_bytes = torch.from_numpy(uid._data.view(np.int8).copy())
    dist.broadcast(uid_bytes, 0, group=GLOO)
    uid._data.view(np.int8)[:] = uid_bytes.numpy()
    nvshmem.init(device=device, uid=uid, rank=rank, nranks=dist.get_world_size(), initializer_method="uid")
    return nvshmem


def main(argv: list[str] | None = None) -> None:
    """The command line (see the module's docstring); run under torchrun.

    Arguments:
        argv: the arguments (None: sys.argv's); the seed's benchmarks/bench_p2p.py
            and bench_allgather.py pass --table.
    """
    global GLOO, SHARED
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--table", choices=("p2p", "allgather", "both"), default="both")
    ap.add_argument("--max-bytes", type=int, default=1 << 30, help="skip rows above this size")
    ap.add_argument("--json", help="write the rows here (rank 0)")
    ap.add_argument("-n", "--iters", type=int, default=20)
    ap.add_argument("-w", "--warmup", type=int, default=5)
    ap.add_argument("--nvshmem", choices=("auto", "on", "off"), default="auto",
                    help="the P2P table's NVSHMEM column through nvshmem4py (auto: where it is installed)")
    a = ap.parse_args(argv)
    if a.iters < 1 or a.warmup < 0:
        sys.exit("nvshmem_tutorial.bench: -n must be >= 1 and -w >= 0")
    if "RANK" not in os.environ:
        sys.exit("nvshmem_tutorial.bench: launch with torchrun --nproc_per_node=2 -m nvshmem_tutorial.bench")
    # The 1 GB row needs a symmetric tensor of 1 GB (the default heap is 1 GiB in all).
    os.environ.setdefault("NVST_SYMMETRIC_SIZE", str(3 << 30))
    SHARED = os.environ.get("NVST_TEST_SHARE_GPUS") == "1"
    local = 0 if SHARED else int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    if SHARED:  # NCCL refuses two ranks on one GPU
        dist.init_process_group("gloo")
    else:
        dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    if dist.get_world_size() < 2:
        sys.exit("nvshmem_tutorial.bench: needs at least 2 ranks")
    GLOO = dist.new_group(backend="gloo")
    nvshmem = start_nvshmem4py(a.nvshmem, local)
    nt.init_from_torch(backend="nvst")  # ours on its own heap, even beside NVSHMEM
    rows: list[Row] = []
    t0 = time.time()
    if a.table in ("p2p", "both"):
        p2p_table(a.iters, a.warmup, rows, nvshmem, a.max_bytes)
    if a.table in ("allgather", "both"):
        allgather_table(a.iters, a.warmup, rows, a.max_bytes)
    if dist.get_rank() == 0:
        print(f"# done in {time.time() - t0:.0f} s; {torch.cuda.get_device_name()}, torch {torch.__version__}"
              + (", ranks sharing one GPU" if SHARED else ""), flush=True)
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"date": time.strftime("%Y-%m-%d"), "gpu": torch.cuda.get_device_name(),
                           "world": dist.get_world_size(), "torch": torch.__version__, "shared_gpu": SHARED,
                           "nvshmem4py": nvshmem is not None, "rows": rows}, f, indent=1)
    nt.finalize()
    if nvshmem is not None:
        nvshmem.finalize()
    dist.destroy_process_group()


GLOO: Any = None
SHARED = False
if __name__ == "__main__":
    main()
