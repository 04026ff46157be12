"""r159 probe: host and wall time of ep.Buffer's normal-mode calls from
Python, ep_old (a655a2c's ep.py) against the new one (one C++ call copies
the outputs out; no torch.cuda.stream context), one rank. Per call: host =
the Python call alone; wall = the call plus torch.cuda.synchronize()."""
import statistics, time
import torch, torch.distributed as dist
import nvshmem_tutorial as nt
import nvshmem_tutorial.ep as ep_new
import nvshmem_tutorial.ep_old as ep_old

dist.init_process_group("gloo")
torch.cuda.set_device(0)
nt.init_from_torch()
DEV = torch.device("cuda", 0)

def med(fn, n):
    for _ in range(5): fn(); torch.cuda.synchronize()
    host, wall = [], []
    for _ in range(n):
        torch.cuda.synchronize()
        t0 = time.perf_counter(); fn(); t1 = time.perf_counter(); torch.cuda.synchronize(); t2 = time.perf_counter()
        host.append((t1 - t0) * 1e6); wall.append((t2 - t0) * 1e6)
    return statistics.median(host), statistics.median(wall)

def med2(fa, fb, n):
    """fa and fb alternated call by call (drift hits both alike): (host, wall) medians of each."""
    for _ in range(5): fa(); fb(); torch.cuda.synchronize()
    out = {0: ([], []), 1: ([], [])}
    for i in range(2 * n):
        fn = fa if i % 2 == 0 else fb
        torch.cuda.synchronize()
        t0 = time.perf_counter(); fn(); t1 = time.perf_counter(); torch.cuda.synchronize(); t2 = time.perf_counter()
        out[i % 2][0].append((t1 - t0) * 1e6); out[i % 2][1].append((t2 - t0) * 1e6)
    return [(statistics.median(h), statistics.median(w)) for h, w in (out[0], out[1])]

for T, H, K, E in ((256, 7168, 8, 256), (4096, 7168, 8, 256), (256, 7168, 8, 256), (4096, 7168, 8, 256)):
    g = torch.Generator().manual_seed(T)
    x = torch.randn((T, H), generator=g).to(torch.bfloat16).to(DEV)
    idx = torch.rand((T, E), generator=g).topk(K, dim=1).indices.to(torch.int64)
    idx[torch.rand((T, K), generator=g) < 0.1] = -1
    idx = idx.to(DEV)
    w = torch.rand((T, K), generator=g).to(DEV)
    bufs = {"old": ep_old.Buffer(None, num_nvl_bytes=1 << 30), "new": ep_new.Buffer(None, num_nvl_bytes=1 << 30)}
    calls, outs = {}, {}
    for name, buf in bufs.items():
        per_rank, _, per_expert, in_rank, _ = buf.get_dispatch_layout(idx, E)
        first = (lambda buf=buf, a=(per_rank, in_rank, per_expert): buf.dispatch(
            x, num_tokens_per_rank=a[0], is_token_in_rank=a[1], num_tokens_per_expert=a[2], topk_idx=idx,
            topk_weights=w))
        recv_x, recv_idx, recv_w, counts, handle, _ = first()
        y = recv_x.clone()
        calls[name] = {
            "get_dispatch_layout": lambda buf=buf: buf.get_dispatch_layout(idx, E),
            "dispatch (first)": first,
            "dispatch (cached)": lambda buf=buf, h=handle: buf.dispatch(x, handle=h),
            "combine": lambda buf=buf, h=handle, y=y, rw=recv_w: buf.combine(y, h, topk_weights=rw),
        }
        comb, comb_w, _ = buf.combine(y, handle, topk_weights=recv_w)
        torch.cuda.synchronize()
        outs[name] = [t.clone() for t in (recv_x, recv_idx, recv_w, comb, comb_w)]
    print(f"## T={T} H={H} top-{K} of {E}, 1 rank: host us / wall us per call (median of 100, old and new alternated)")
    print(f"{'call':<22} {'old':>17} {'new':>17}")
    for k in calls["old"]:
        a, b = med2(calls["old"][k], calls["new"][k], 100)
        print(f"{k:<22} {a[0]:7.1f} / {a[1]:7.1f} {b[0]:7.1f} / {b[1]:7.1f}")
    same = all(torch.equal(a, b) for a, b in zip(outs["old"], outs["new"]))
    print("outputs old vs new:", "SAME" if same else "DIFFERENT", [tuple(t.shape) for t in outs["new"]])
    for b in bufs.values():
        b.destroy()
    del bufs, calls
    torch.cuda.synchronize()
print("DONE")
