"""r154 probe: where the host time of a small nvshmem_put_tensor_async goes,
old path (the code before this change, copied here) against the new one
and torch's own copy_. Run under torchrun, 1 rank (put to itself) or 2
ranks sharing the GPU (put to the peer)."""
import os, statistics, sys, time
import torch, torch.distributed as dist
import nvshmem_tutorial as nt
from nvshmem_tutorial import _nvst
from nvshmem_tutorial import tensors as T

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)) if not os.environ.get("NVST_TEST_SHARE_GPUS") else 0)
nt.init_from_torch()
dev = torch.cuda.current_device()
peer = (rank + 1) % world

def old_check(t, fn, name):
    if not isinstance(t, torch.Tensor): raise TypeError
    if not t.is_cuda: raise ValueError
    if t.device.index != _nvst.device(): raise ValueError
    if not t.is_contiguous(): raise ValueError

def old_put(dst, src, pe):  # tensors.py before r154, verbatim in effect
    if not _nvst.initialized(): raise RuntimeError
    if _nvst.device() < 0: raise RuntimeError
    old_check(dst, "x", "dst"); old_check(src, "x", "src")
    if dst.nbytes != src.nbytes: raise ValueError
    _nvst.putmem_on_stream(dst.data_ptr(), src.data_ptr(), src.nbytes, pe, torch.cuda.current_stream().cuda_stream)

def host_us(fn, n=20000):
    for _ in range(500): fn()
    torch.cuda.synchronize()
    runs = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n): fn()
        runs.append((time.perf_counter() - t0) * 1e6 / n)
        torch.cuda.synchronize()
    return statistics.median(runs)

def gpu_us(fn, iters=2000):  # as bench.py's timed(): events around back-to-back calls
    for _ in range(200): fn()
    runs = []
    for _ in range(5):
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(iters): fn()
        e.record(); e.synchronize()
        runs.append(s.elapsed_time(e) * 1000.0 / iters)
    return statistics.median(runs)

out = []
def say(s):
    if rank == 0: print(s, flush=True)

say(f"# world={world} torch {torch.__version__} {torch.cuda.get_device_name()} raw_stream={T._raw_stream is not None}")
for nbytes in (4096, 16384, 1 << 20):
    n = nbytes // 2
    g = torch.Generator().manual_seed(nbytes)
    src = torch.randint(-30000, 30000, (n,), generator=g, dtype=torch.int16).view(torch.bfloat16).to(dev)
    sym = nt.alloc_tensor((n,), torch.bfloat16)
    plain = torch.empty_like(src)
    view = nt.peer_tensor(sym, peer)
    dist.barrier()
    s = T.current_stream(dev)
    rows = {}
    if rank == 0:
        rows["torch copy_ plain"] = (host_us(lambda: plain.copy_(src)), gpu_us(lambda: plain.copy_(src)))
        rows["torch copy_ peer view"] = (host_us(lambda: view.copy_(src)), gpu_us(lambda: view.copy_(src)))
        rows["old put"] = (host_us(lambda: old_put(sym, src, peer)), gpu_us(lambda: old_put(sym, src, peer)))
        rows["new put"] = (host_us(lambda: nt.put_tensor_async(sym, src, peer)),
                           gpu_us(lambda: nt.put_tensor_async(sym, src, peer)))
        rows["raw _nvst.putmem_on_stream"] = (host_us(lambda: _nvst.putmem_on_stream(sym.data_ptr(), src.data_ptr(), nbytes, peer, s)), 0.0)
        if nbytes == 4096:
            for name, fn in [
                ("torch.cuda.current_stream().cuda_stream", lambda: torch.cuda.current_stream().cuda_stream),
                ("torch._C._cuda_getCurrentRawStream(dev)", lambda: T._raw_stream(dev)),
                ("torch.cuda.current_device()", lambda: torch.cuda.current_device()),
                ("_nvst.device()", lambda: _nvst.device()),
                ("_nvst.initialized()", lambda: _nvst.initialized()),
                ("t.device.index", lambda: src.device.index),
                ("t.get_device()", lambda: src.get_device()),
                ("t.is_cuda", lambda: src.is_cuda),
                ("t.is_contiguous()", lambda: src.is_contiguous()),
                ("t.nbytes", lambda: src.nbytes),
                ("t.data_ptr()", lambda: src.data_ptr()),
                ("old check_tensor", lambda: old_check(src, "x", "src")),
                ("new check_tensor", lambda: T.check_tensor(src, "x", "src", device=dev)),
            ]:
                rows[name] = (host_us(fn), 0.0)
        say(f"## {nbytes} bytes, rank 0 -> PE {peer}: host us per call (perf_counter, 20000 calls), GPU-event us per op (bench.py's way)")
        for k, (h, gp) in rows.items():
            say(f"{k:<44} host {h:7.3f}   per-op {gp:7.3f}" if gp else f"{k:<44} host {h:7.3f}")
    dist.barrier()
    # correctness of the new path: every byte arrives
    sym.fill_(-1); torch.cuda.synchronize(); dist.barrier()
    if rank == 0:
        nt.put_tensor(sym, src, peer)
    dist.barrier(); torch.cuda.synchronize()
    if rank == peer or world == 1:
        wrong = int((sym.view(torch.int16) != src.view(torch.int16)).sum())
        print(f"[rank {rank}] {nbytes} bytes arrived, wrong={wrong}", flush=True)
    del view
    dist.barrier()
    nt.nvshmem_free_tensor(sym)
# bad input still named
for bad, what in [(torch.zeros(4), "CPU tensor"), (torch.zeros(8, device=dev)[::2], "non-contiguous")]:
    try:
        nt.put_tensor_async(nt.alloc_tensor((4,)), bad, peer); print("NOT RAISED", what)
    except (TypeError, ValueError) as e:
        say(f"{what}: {e}")
dist.barrier()
say("DONE")
