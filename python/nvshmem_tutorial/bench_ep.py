"""What ep.Buffer's low-latency calls cost from PyTorch, per call:

    torchrun --nproc_per_node=N -m nvshmem_tutorial.bench_ep [--tokens 128] [--hidden 7168] [--topk 8]
                                                          [--experts 288] [--json FILE]

For low_latency_dispatch (fp8, bf16), low_latency_combine (bf16, LogFMT),
a decode step's pair (dispatch fp8, then combine bf16 of its rows) and,
for the Python layer's cost beside them, nvshmem_tutorial.distributed's
all_reduce of 4 KB (its cross-PE argument check rides in the data path):
 - host: the CPU time of one Python call, 100 calls back to back with no
   wait for the GPU inside (median of 5 runs);
 - gpu: GPU time per call, 20 calls captured in one CUDA graph and replayed
   (median of 10 replays);
 - eager: one call on an idle GPU, CUDA events around it (median of 20);
 - stream: calls issued back to back on the stream, 100 of them, per call
   (median of 5 runs): what a loop that does nothing else gets, at best
   max(host, gpu) each.
The slowest rank's value of each. Every expert hands back what it received,
so the combine's output is checked against sum_k w[t][k] * x[t] (#wrong:
values off by more than bf16 rounding). Ranks may share one GPU
(NVST_TEST_SHARE_GPUS=1); the times are then the GPU's time slices.
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

import nvshmem_tutorial as nt
import nvshmem_tutorial.distributed as nd
import nvshmem_tutorial.ep as deep_ep
from nvshmem_tutorial import bench

Call = Callable[[], Any]


def slowest(value: float) -> float:
    """The largest of every rank's `value` (collective)."""
    t = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=GLOO)
    return float(t.item())


def host_us(call: Call, n: int = 100) -> float:
    """CPU microseconds a call, n calls back to back, no GPU wait inside."""
    runs = []
    for _ in range(11):  # a shared host's noise moves single runs by several us
        torch.cuda.synchronize()
        dist.barrier(group=GLOO)
        start = time.perf_counter()
        for _ in range(n):
            call()
        runs.append((time.perf_counter() - start) * 1e6 / n)
    torch.cuda.synchronize()
    return slowest(statistics.median(runs))


def stream_us(call: Call, n: int = 100) -> float:
    """GPU microseconds a call, n calls issued back to back on the stream
    (bench.timed: the median of 5 runs)."""
    return slowest(bench.timed(call, n, 0))


def eager_us(call: Call) -> float:
    """One call on an idle GPU, events around it: the median of 20."""
    runs = []
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(20):
        torch.cuda.synchronize()
        dist.barrier(group=GLOO)
        start.record()
        call()
        end.record()
        end.synchronize()
        runs.append(start.elapsed_time(end) * 1000.0)
    return slowest(statistics.median(runs))


def graph_us(call: Call, n: int = 20) -> float:
    """GPU microseconds a call, n calls in one CUDA graph (median of 10 replays)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up off the capture, as torch asks
        call()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(n):
            call()
    graph.replay()
    torch.cuda.synchronize()
    runs = []
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(10):
        dist.barrier(group=GLOO)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        runs.append(start.elapsed_time(end) * 1000.0 / n)
    return slowest(statistics.median(runs))


def main(argv: list[str] | None = None) -> None:
    """The command line (see the module's docstring); run under torchrun.

    Arguments:
        argv: the arguments (None: sys.argv's).
    """
    global GLOO
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=128, help="tokens per rank (num_max_dispatch_tokens_per_rank)")
    ap.add_argument("--hidden", type=int, default=7168)
    ap.add_argument("--topk", type=int, default=8)
    ap.add_argument("--experts", type=int, default=288)
    ap.add_argument("--json", help="write the rows here (rank 0)")
    a = ap.parse_args(argv)
    if "RANK" not in os.environ:
        sys.exit("nvshmem_tutorial.bench_ep: launch with torchrun --nproc_per_node=N -m nvshmem_tutorial.bench_ep")
    shared = os.environ.get("NVST_TEST_SHARE_GPUS") == "1"
    local = 0 if shared else int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("gloo")
    GLOO = bench.GLOO = dist.group.WORLD
    world, rank = dist.get_world_size(), dist.get_rank()
    T, H, K, E = a.tokens, a.hidden, a.topk, a.experts
    if E % world or K > E or H % 128:
        sys.exit(f"nvshmem_tutorial.bench_ep: {E} experts over {world} ranks, top-{K}, hidden {H} (a multiple "
                 "of 128) do not fit")
    size = deep_ep.Buffer.get_low_latency_rdma_size_hint(T, H, world, E, K)
    buf = deep_ep.Buffer(None, num_rdma_bytes=size, low_latency_mode=True)
    dev = torch.device("cuda", local)
    gen = torch.Generator(device="cpu").manual_seed(1 + rank)
    x = (torch.rand((T, H), generator=gen) * 4 - 2).to(torch.bfloat16).to(dev)
    idx = torch.stack([torch.randperm(E, generator=gen)[:K] for _ in range(T)]).to(dev)
    w = (torch.rand((T, K), generator=gen) + 0.25).to(dev)
    # Both buffer sets hold bf16 rows; the experts hand back what they got.
    y = [buf.low_latency_dispatch(x, idx, T, E, use_fp8=False)[0].clone() for _ in range(2)]
    handles = [buf.low_latency_dispatch(x, idx, T, E, use_fp8=False)[2] for _ in range(2)]
    turn = [0]
    out = torch.empty((T, H), dtype=torch.bfloat16, device=dev)  # DeepEP's out=: no allocation per call
    small = torch.zeros(1024, dtype=torch.float32, device=dev)  # summed in place: zeros stay zeros

    def combine(logfmt: bool) -> Any:
        turn[0] ^= 1
        h = handles[turn[0]]
        return buf.low_latency_combine(y[h.buffer_index], idx, w, h, use_logfmt=logfmt, out=out)[0]

    def pair() -> Any:
        handle = buf.low_latency_dispatch(x, idx, T, E, use_fp8=True)[2]
        return buf.low_latency_combine(y[handle.buffer_index], idx, w, handle, out=out)[0]

    calls: list[tuple[str, Call]] = [
        ("low_latency_dispatch fp8", lambda: buf.low_latency_dispatch(x, idx, T, E, use_fp8=True)),
        ("low_latency_dispatch bf16", lambda: buf.low_latency_dispatch(x, idx, T, E, use_fp8=False)),
        ("low_latency_combine bf16", lambda: combine(False)),
        ("low_latency_combine LogFMT", lambda: combine(True)),
        ("dispatch fp8 + combine bf16", pair),
        ("nd.all_reduce 4 KB", lambda: nd.all_reduce(small)),
    ]
    rows = []
    if rank == 0:
        print(f"# ep.Buffer low latency from PyTorch, {world} rank(s), {T} tokens, hidden {H}, top-{K} of {E}; us "
              "per call, slowest rank")
        print(f"# {'call':<30} {'host':>8} {'gpu':>8} {'eager':>8} {'stream':>8}")
    for name, call in calls:
        for _ in range(20):
            call()  # warm: lazily loaded kernels, the cached views
        host, gpu, eager, stream = host_us(call), graph_us(call), eager_us(call), stream_us(call)
        rows.append({"op": name, "host_us": host, "gpu_us": gpu, "eager_us": eager, "stream_us": stream})
        if rank == 0:
            print(f"  {name:<30} {host:8.2f} {gpu:8.2f} {eager:8.2f} {stream:8.2f}", flush=True)
    # Check: dispatch bf16, the experts hand back their rows, combine.
    recv, _, handle, _, _ = buf.low_latency_dispatch(x, idx, T, E, use_fp8=False)
    out = buf.low_latency_combine(recv.clone(), idx, w, handle)[0].float()
    want = (w.sum(1, keepdim=True) * x.float()).to(torch.bfloat16).float()
    wrong = int(slowest(float((out - want).abs().gt(want.abs() / 128 + 1e-6).sum().item())))
    if rank == 0:
        print(f"# combine check: {wrong} value(s) wrong; {torch.cuda.get_device_name()}, torch {torch.__version__}"
              + (", ranks sharing one GPU" if shared else ""), flush=True)
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"date": time.strftime("%Y-%m-%d"), "gpu": torch.cuda.get_device_name(), "world": world,
                           "shape": {"tokens": T, "hidden": H, "topk": K, "experts": E}, "wrong": wrong,
                           "rows": rows}, f, indent=1)
    buf.destroy()
    nt.finalize()
    dist.destroy_process_group()
    if wrong:
        sys.exit(1)


GLOO: Any = None
if __name__ == "__main__":
    main()
