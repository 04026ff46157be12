"""r155 probe: host cost of ep.Buffer's low-latency calls from Python, the
ep.py before r155 (ep_old, next to it in the package) against the new one,
DeepEP's LL shape (128 tokens, hidden 7168, top-8 of 256) at one rank.
Each number: median over 300 calls of the host time of one call (the GPU is
idle before each), and outputs compared old vs new."""
import os, statistics, time
import torch, torch.distributed as dist
import nvshmem_tutorial as nt
import nvshmem_tutorial.ep as ep_new
import nvshmem_tutorial.ep_old as ep_old

dist.init_process_group("gloo")
torch.cuda.set_device(0)
nt.init_from_torch()
DEV = torch.device("cuda", 0)
M, H, K, E = 128, 7168, 8, 256
g = torch.Generator().manual_seed(5)
x = torch.randn((M, H), generator=g).to(torch.bfloat16).to(DEV)
idx = torch.rand((M, E), generator=g).topk(K, dim=1).indices.to(torch.int64)
idx[torch.rand((M, K), generator=g) < 0.1] = -1
idx = idx.to(DEV)
w = torch.rand((M, K), generator=g).to(DEV)

def host_us(fn, n=300):
    for _ in range(30): fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(n):
        t0 = time.perf_counter(); fn(); ts.append((time.perf_counter() - t0) * 1e6)
        torch.cuda.synchronize()
    return statistics.median(ts)

def pairs(send, n=300):
    """Host us of the send call and of its hook, medians; the hook always runs."""
    for _ in range(30): send()()
    torch.cuda.synchronize()
    a, b = [], []
    for _ in range(n):
        t0 = time.perf_counter(); h = send(); t1 = time.perf_counter(); h(); t2 = time.perf_counter()
        a.append((t1 - t0) * 1e6); b.append((t2 - t1) * 1e6)
        torch.cuda.synchronize()
    return statistics.median(a), statistics.median(b)

results = {}
for name, mod in (("old", ep_old), ("new", ep_new), ("old again", ep_old)):
    size = mod.Buffer.get_low_latency_rdma_size_hint(M, H, 1, E, K)
    buf = mod.Buffer(None, num_rdma_bytes=size, low_latency_mode=True)
    stats = torch.zeros(E, dtype=torch.int32, device=DEV)
    r = {}
    for fp8 in (True, False):
        tag = "fp8" if fp8 else "bf16"
        r[f"dispatch {tag}"] = host_us(lambda: buf.low_latency_dispatch(x, idx, M, E, use_fp8=fp8))
        r[f"dispatch {tag} +stats"] = host_us(lambda: buf.low_latency_dispatch(
            x, idx, M, E, use_fp8=fp8, cumulative_local_expert_recv_stats=stats))
        send, hook = pairs(lambda: buf.low_latency_dispatch(x, idx, M, E, use_fp8=fp8, return_recv_hook=True)[4])
        r[f"dispatch {tag} send (hook mode)"], r[f"dispatch {tag} hook()"] = send, hook
    recv_x, recv_count, handle, _, _ = buf.low_latency_dispatch(x, idx, M, E, use_fp8=False)
    y = recv_x.clone()
    r["combine bf16"] = host_us(lambda: buf.low_latency_combine(y, idx, w, handle))
    send, hook = pairs(lambda: buf.low_latency_combine(y, idx, w, handle, return_recv_hook=True)[2])
    r["combine send (hook mode)"], r["combine hook()"] = send, hook
    # outputs, for old vs new: an fp8 dispatch's bytes and scales, and a bf16 round trip's combine
    rx, rc, hd, _, _ = buf.low_latency_dispatch(x, idx, M, E, use_fp8=True)
    torch.cuda.synchronize()
    q, sc = rx
    n = rc.tolist()
    d8 = (sum(int(q[e, :n[e]].view(torch.uint8).long().sum()) for e in range(E)),
          sum(float(sc[e, :n[e]].double().sum()) for e in range(E)))
    rb, _, hb, _, _ = buf.low_latency_dispatch(x, idx, M, E, use_fp8=False)
    out, _, _ = buf.low_latency_combine(rb.clone(), idx, w, hb)
    torch.cuda.synchronize()
    digest = d8 + (int(out.view(torch.int16).long().sum()), int(stats.sum()))
    r["digest"] = digest
    results[name] = r
    buf.destroy(); del buf
    torch.cuda.synchronize()

# the new path's parts
from nvshmem_tutorial.tensors import tensor_at, check_tensor, current_stream
size = ep_new.Buffer.get_low_latency_rdma_size_hint(M, H, 1, E, K)
buf = ep_new.Buffer(None, num_rdma_bytes=size, low_latency_mode=True)
buf.low_latency_dispatch(x, idx, M, E, use_fp8=True)
ll = buf._ll
args = (x.data_ptr(), idx.data_ptr(), M, H, K, E, True)
o = ll.low_latency_dispatch(*args, current_stream(), "both", round_scale=False, use_ue8m0=False, wait_recv_cost_stats=0)
shape = (E, o["max_rows_per_expert"], H)
parts = {
    "C++ ll.low_latency_dispatch both fp8": lambda: ll.low_latency_dispatch(
        *args, current_stream(), "both", round_scale=False, use_ue8m0=False, wait_recv_cost_stats=0),
    "C++ ll.low_latency_dispatch send fp8": None,
    "tensor_at (DLPack)": lambda: tensor_at(o["recv_x"], shape, torch.uint8, ll),
    "_ll_view (cached)": lambda: buf._ll_view(o["recv_x"], shape, torch.uint8),
    "check_tensor": lambda: check_tensor(x, "p", "x", [torch.bfloat16]),
    "current_stream()": lambda: current_stream(),
}
def send_recv():
    ll.low_latency_dispatch(*args, current_stream(), "send", round_scale=False, use_ue8m0=False, wait_recv_cost_stats=0)
for k, fn in parts.items():
    if fn is None:
        a, b = pairs(lambda: (ll.low_latency_dispatch(*args, current_stream(), "send", round_scale=False,
                                                      use_ue8m0=False, wait_recv_cost_stats=0),
                              lambda: ll.low_latency_dispatch(*args, current_stream(), "receive", -1,
                                                              wait_recv_cost_stats=0))[1])
        print(f"{k:<40} {a:7.2f}   its receive: {b:7.2f}")
    else:
        print(f"{k:<40} {host_us(fn):7.2f}")
print(f"{'host us per call (median of 300)':<34} {'old':>9} {'new':>9} {'old again':>9}")
for k in results["old"]:
    if k == "digest": continue
    print(f"{k:<34} {results['old'][k]:9.2f} {results['new'][k]:9.2f} {results['old again'][k]:9.2f}")
for n in results:
    print(f"digest {n}: {results[n]['digest']}")
print("SAME" if results["old"]["digest"][:3] == results["new"]["digest"][:3] else "DIFFERENT")
print("DONE")
