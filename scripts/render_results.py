#!/usr/bin/env python3
"""Renders bench/baselines/*.json into the README's results table, the
book's tables and PNG plots (bench/baselines/plots/).

Tables live between marker comments in README.md and docs/**/*.md:

    <!-- results:NAME -->
    ...rendered, do not edit by hand...
    <!-- /results:NAME -->

    render_results.py            rewrite every block and the plots
    render_results.py --check    render in memory; exit 1 where a block differs
                                 from what the committed JSON gives (CI)
    render_results.py --no-plots rewrite the blocks only

The tables need only the standard library; the plots need matplotlib.
"""
import argparse
import glob
import json
import math
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASELINES = os.path.join(ROOT, "bench", "baselines")
PLOTS = os.path.join(BASELINES, "plots")
BLOCK = re.compile(r"(<!-- results:([a-z0-9_]+) -->\n)(.*?)(<!-- /results:\2 -->)", re.S)
LATENCY_OPS = ("pingpong", "bootstrap", "signal_pingpong")


# ---------------------------------------------------------------- baselines

class Baseline:
    """One machine shape's file: sections of rows, looked up by op, impl, bytes."""

    def __init__(self, path):
        with open(path) as f:
            self.doc = json.load(f)
        self.shape = os.path.splitext(os.path.basename(path))[0]
        self.sections = self.doc["sections"]

    def machine(self):
        gpus = self.doc.get("gpus") or []
        return f"{len(gpus)}x {gpus[0]}" if gpus else "host only"

    def row(self, section, op, impl, nbytes=None):
        for r in self.sections.get(section, {}).get("rows", []):
            if r["op"] == op and r["impl"] == impl and (nbytes is None or r["bytes"] == nbytes):
                return r
        return None

    def need(self, section, op, impl, nbytes=None):
        r = self.row(section, op, impl, nbytes)
        if r is None:
            raise KeyError(f"{self.shape}.json: no row {section}/{op}/{impl}/{nbytes}")
        return r

    def sizes(self, section, op):
        return sorted({r["bytes"] for r in self.sections.get(section, {}).get("rows", []) if r["op"] == op})

    def intro(self):
        """One line: machine, date, commit and the versions measured."""
        d = self.doc
        v = d.get("versions", {})
        names = [("cuda_runtime", "CUDA"), ("driver", "driver"), ("nccl", "NCCL"), ("nvshmem", "NVSHMEM"),
                 ("torch", "PyTorch"), ("nvshmem4py", "nvshmem4py")]
        vers = ", ".join(f"{label} {v[k]}" for k, label in names if v.get(k))
        return (f"{self.machine()} (`{self.shape}.json`), {str(d['date'])[:10]}, commit "
                f"{str(d['commit'])[:7]}; {vers}.")


def load_baselines():
    out = {}
    for path in sorted(glob.glob(os.path.join(BASELINES, "*.json"))):
        b = Baseline(path)
        out[b.shape] = b
    return out


# ------------------------------------------------------------- formatting

KB, MB, GB = 1 << 10, 1 << 20, 1 << 30


def size(b):
    for unit, name in ((GB, "GB"), (MB, "MB"), (KB, "KB")):
        if b >= unit and b % unit == 0:
            return f"{b // unit} {name}"
    return f"{b} B"


def num(v):
    if v is None:
        return "n/a"
    a = abs(v)
    if a >= 1000:
        return f"{v:.0f}"
    if a >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def is_latency(op):
    return op.startswith(LATENCY_OPS)


def value(r, latency):
    return r["time_us"] if latency else r["algbw_gbps"]


def speedup(mine, theirs, latency):
    """How many times faster ours is: time over time, or bandwidth over bandwidth."""
    if mine is None or theirs is None:
        return None
    a, b = value(mine, latency), value(theirs, latency)
    if a <= 0 or b <= 0:
        return None
    return b / a if latency else a / b


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def against(b, section, op, nbytes, ours, others, latency):
    """'NCCL 6.45 (1.71x), ...' for each baseline impl measured."""
    mine = b.need(section, op, ours, nbytes)
    parts = []
    for impl, label in others:
        theirs = b.row(section, op, impl, nbytes)
        if theirs is None:
            continue
        x = speedup(mine, theirs, latency)
        parts.append(f"{label} {num(value(theirs, latency))}" + (f" ({x:.2f}x)" if x else ""))
    return num(value(mine, latency)), ", ".join(parts) or "-"


# ---------------------------------------------------------------- blocks

EP_SHAPE = "deepep T=4096 H=7168 top8/256"
EP_LL = "deepep T=128 H=7168 top8/256"
COLL_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")


def block_summary(bs):
    b = bs["h200-x2"]
    rows = []
    p2p = [("cuda_ipc_ce", "copy engine"), ("nvshmem", "NVSHMEM"), ("nccl", "NCCL")]
    for n in (64 * KB, 16 * MB, GB):
        rows.append(["device put, PE 0 -> PE 1", size(n), "GB/s", *against(b, "p2p", "put", n, "nvst_put", p2p, False)])
    rows.append(["`p` + `wait_until` ping-pong, one way", "8 B", "us",
                 *against(b, "p2p", "pingpong", 8, "nvst_p_wait", [("nvshmem", "NVSHMEM")], True)])
    for op in COLL_OPS:
        for n in (KB, MB, 256 * MB):
            kind = "bf16 sum" if op in ("all_reduce", "reduce_scatter") else "bf16"
            rows.append([f"{op} ({kind}, CUDA graph)", size(n), "us",
                         *against(b, "coll", f"{op}_graph", n, "nvst", [("nccl", "NCCL")], True)])
    for op, label in (("dispatch_bf16", "EP dispatch bf16"), ("dispatch_fp8", "EP dispatch fp8"),
                      ("combine_bf16", "EP combine bf16")):
        rows.append([f"{label}, 4096 tokens, hidden 7168, top-8 of 256", "-", "GB/s",
                     *against(b, "ep", f"{op} {EP_SHAPE}", None, "nvst",
                              [("nccl_a2av", "NCCL all-to-all-v")], False)])
    for op, label in (("ll_dispatch_fp8", "low-latency dispatch fp8"), ("ll_combine_bf16", "low-latency combine")):
        r = b.need("ep", f"{op} {EP_LL}", "nvst")
        rows.append([f"{label}, 128 tokens", "-", "us", num(r["time_us"]), "-"])
    for prov in ("shm", "tcp"):
        rows.append([f"put across logical nodes (proxy, {prov})", "16 MB", "GB/s",
                     *against(b, f"p2p_nodes_{prov}", "put", 16 * MB, "nvst_proxy",
                              [("nccl_net", "NCCL net"), ("raw_fabric", "raw libfabric")], False)])
    r = b.need("fifo", "fifo_nop", "8_blocks")
    rows.append(["GPU -> proxy commands, 8 blocks", "-", "M/s", num(r["algbw_gbps"]), "-"])
    torch_cols = [("ipc", "torch `copy_` over IPC"), ("nccl", "NCCL"), ("nvshmem", "nvshmem4py")]
    for n in (16 * KB, GB):
        rows.append(["PyTorch tensor put", size(n), "GB/s",
                     *against(b, "torch", "torch_p2p", n, "ours", torch_cols, False)])
    wrong = sum(r["wrong"] for sec in b.sections.values() for r in sec["rows"])
    checked = ("every row of the run checked its data and found it right (#wrong 0)" if wrong == 0 else
               f"WARNING: {wrong} wrong words in the run's rows (see #wrong in {b.shape}.json)")
    head = (f"{b.intro()} NVLink multicast off. x: how many times faster ours is than that baseline; "
            f"{checked}.")
    return head + "\n\n" + table(["benchmark", "size", "unit", "ours", "against (ours' speed-up)"], rows)


def block_p2p(bs):
    b = bs["h200-x2"]
    impls = [("nvst_put", "ours (SM stores)"), ("nvst_put_tma", "ours (TMA)"), ("nvst_put_ce", "ours (copy engine)"),
             ("cuda_ipc_ce", "CUDA IPC copy engine"), ("nvshmem", "NVSHMEM putmem_nbi_block"), ("nccl", "NCCL")]
    rows = []
    for n in (4 * KB, 64 * KB, MB, 16 * MB, 64 * MB, 256 * MB, GB):
        rows.append([size(n)] + [num(b.need("p2p", "put", i, n)["algbw_gbps"]) for i, _ in impls])
    pp = b.need("p2p", "pingpong", "nvst_p_wait")["time_us"]
    nv = b.need("p2p", "pingpong", "nvshmem")["time_us"]
    return (f"{b.intro()}\n\nPE 0 -> PE 1, GB/s (`nvst bench p2p`):\n\n"
            + table(["bytes"] + [label for _, label in impls], rows)
            + f"\n\nPing-pong one way (`p` + `wait_until`): ours {num(pp)} us, NVSHMEM {num(nv)} us.")


def block_fifo(bs):
    names = [("1_thread", "1 thread"), ("1_warp", "1 warp"), ("8_blocks", "8 blocks of a warp"),
             ("32_blocks", "32 blocks"), ("132_blocks", "132 blocks")]
    have = [b for b in bs.values() if "fifo" in b.sections]
    rows = [[label] + [num(b.need("fifo", "fifo_nop", impl)["algbw_gbps"]) for b in have] for impl, label in names]
    intro = "\n".join(f"- {b.intro()}" for b in have)
    return (intro + "\n\nGPU -> proxy commands per second (M/s, `nvst bench fifo`):\n\n"
            + table(["producers"] + [b.machine() for b in have], rows))


def block_proxy(bs):
    b = bs["h200-x2"]
    impls = [("nvst_proxy", "ours, kernel-issued"), ("nvst_proxy_host", "ours, host-issued"),
             ("nccl_net", "NCCL net"), ("raw_fabric", "raw libfabric")]
    out = [b.intro(), ""]
    for prov in ("shm", "tcp"):
        sec = f"p2p_nodes_{prov}"
        rows = []
        for n in b.sizes(sec, "put"):
            mine = b.need(sec, "put", "nvst_proxy", n)
            rows.append([size(n)] + [num(b.need(sec, "put", i, n)["algbw_gbps"]) for i, _ in impls]
                        + [num(mine["time_us"])])
        env = " ".join(f"{k}={v}" for k, v in b.sections[sec].get("env", {}).items())
        out += [f"Over `{prov}`, GB/s (`{env}`):", "",
                table(["bytes"] + [label for _, label in impls] + ["ours, us"], rows), ""]
    h = bs.get("h100-x1")
    if h and "host" in h.sections:
        rows = []
        for n in (4 * KB, 64 * KB, MB, 16 * MB, 64 * MB):
            mine, raw = h.need("host", "fabric_put", "nvst", n), h.need("host", "fabric_put", "raw_fabric", n)
            rows.append([size(n), num(mine["algbw_gbps"]), num(raw["algbw_gbps"]),
                         f"{speedup(mine, raw, False):.2f}x"])
        out += [f"Host-memory PEs over `tcp;ofi_rxm` (`nvst bench host`), {h.intro()}", "",
                table(["bytes", "ours, GB/s", "raw libfabric, GB/s", "ours / raw"], rows), ""]
    return "\n".join(out).rstrip()


def block_coll(bs):
    b = bs["h200-x2"]
    out = [b.intro(), "", "bf16 sum, time per operation in us under CUDA graphs (`nvst bench coll`); "
           "ours / NCCL / NVSHMEM's own collectives, and ours' speed-up over NCCL:", ""]
    rows = []
    for n in (KB, 64 * KB, 256 * KB, MB, 16 * MB, 64 * MB, 256 * MB):
        cells = [size(n)]
        for op in COLL_OPS:
            mine = b.need("coll", f"{op}_graph", "nvst", n)
            nccl = b.need("coll", f"{op}_graph", "nccl", n)
            nv = b.row("coll", f"{op}_graph", "nvshmem", n)
            cells.append(f"{num(mine['time_us'])} / {num(nccl['time_us'])} / {num(nv['time_us']) if nv else 'n/a'} "
                         f"({speedup(mine, nccl, True):.2f}x)")
        rows.append(cells)
    out.append(table(["bytes"] + list(COLL_OPS), rows))
    rows = []
    for n in (KB, 4 * KB, 16 * KB, 64 * KB, 256 * KB, MB):
        auto = b.need("coll", "all_reduce_graph", "nvst", n)["time_us"]
        one = b.need("coll_oneshot", "all_reduce_graph", "nvst", n)["time_us"]
        eager = b.need("coll", "all_reduce_eager", "nvst", n)["time_us"]
        nccl_e = b.need("coll", "all_reduce_eager", "nccl", n)["time_us"]
        rows.append([size(n), num(auto), num(one), num(eager), num(nccl_e)])
    out += ["", "all_reduce at small sizes, us: auto (the ll protocol up to 64 KiB a part) against the push "
            "kernels forced (`NVST_COLL_ALGO=oneshot`), both under graphs, and eager launches:", "",
            table(["bytes", "auto, graph", "oneshot, graph", "auto, eager", "NCCL, eager"], rows)]
    return "\n".join(out)


def block_ep(bs):
    b = bs["h200-x2"]
    out = [b.intro(), "", "Normal mode, GB/s by DeepEP's accounting (time in us); the NCCL column does the "
           "same routing with grouped send/recv; `ours on NVSHMEM` is `nvst_nvshmem bench ep`:", ""]
    rows = []
    for shape, label in ((EP_SHAPE, "4096 tok, hidden 7168, top-8/256"),
                         ("small T=4096 H=4096 top6/64", "4096 tok, hidden 4096, top-6/64"),
                         ("decode T=128 H=7168 top8/256", "128 tok, hidden 7168, top-8/256")):
        for op in ("dispatch_bf16", "dispatch_fp8", "combine_bf16"):
            name = f"{op} {shape}"
            mine = b.need("ep", name, "nvst")
            nccl = b.need("ep", name, "nccl_a2av")
            sm64 = b.need("ep", name, "nvst_sm64")
            nv = b.row("ep_nvshmem", name, "nvst@nvshmem")
            rows.append([label, op, f"{num(mine['algbw_gbps'])} ({num(mine['time_us'])} us)",
                         num(sm64["algbw_gbps"]), f"{num(nccl['algbw_gbps'])} ({num(nccl['time_us'])} us)",
                         f"{speedup(mine, nccl, False):.2f}x", num(nv["algbw_gbps"]) if nv else "n/a"])
    out.append(table(["shape", "op", "ours, 24 SMs", "ours, 64 SMs", "NCCL all-to-all-v", "speed-up",
                      "ours on NVSHMEM"], rows))
    first = b.need("ep", f"dispatch_bf16 (layout + counts, host sync) {EP_SHAPE}", "nvst")["time_us"]
    ll = [(op, b.need("ep", f"{op} {EP_LL}", "nvst")["time_us"])
          for op in ("ll_dispatch_fp8", "ll_dispatch_bf16", "ll_combine_bf16", "ll_combine_logfmt")]
    out += ["", f"A first dispatch (layout, counts, one host synchronisation) at DeepEP's shape: {num(first)} us.",
            "Low latency, 128 tokens per PE, hidden 7168, top-8 of 256, us: "
            + ", ".join(f"{op[3:]} {num(t)}" for op, t in ll) + "."]
    return "\n".join(out)


def block_torch(bs):
    b = bs["h200-x2"]
    cols = [("nccl", "NCCL send/recv"), ("ipc", "CUDA IPC `copy_`"), ("nvshmem", "nvshmem4py put"),
            ("ours", "ours (`nvshmem_put_tensor_async`)")]
    rows = []
    for n in b.sizes("torch", "torch_p2p"):
        cells = [size(n)]
        for impl, _ in cols:
            r = b.row("torch", "torch_p2p", impl, n)
            cells.append(num(r["algbw_gbps"]) if r else "n/a")
        rows.append(cells)
    ag = []
    for n in b.sizes("torch", "torch_all_gather"):
        nccl, ours = b.need("torch", "torch_all_gather", "nccl", n), b.need("torch", "torch_all_gather", "ours", n)
        ag.append([size(n), num(nccl["busbw_gbps"]), num(ours["busbw_gbps"]), f"{speedup(ours, nccl, True):.2f}x"])
    return (f"{b.intro()}\n\n`torchrun --nproc_per_node=2 -m nvshmem_tutorial.bench --nvshmem on`, P2P rank 0 -> "
            "rank 1, GB/s:\n\n" + table(["bytes"] + [label for _, label in cols], rows)
            + "\n\nAll-gather (bytes per rank), busbw GB/s:\n\n"
            + table(["bytes", "NCCL", "ours", "speed-up"], ag))


BLOCKS = {"summary": block_summary, "p2p": block_p2p, "fifo": block_fifo, "proxy": block_proxy,
          "coll": block_coll, "ep": block_ep, "torch": block_torch}


def render_text(text, bs, where):
    def one(m):
        name = m.group(2)
        if name not in BLOCKS:
            raise KeyError(f"{where}: unknown results block '{name}' (known: {', '.join(sorted(BLOCKS))})")
        return m.group(1) + BLOCKS[name](bs).rstrip() + "\n" + m.group(4)
    return BLOCK.sub(one, text)


def documents():
    files = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "**", "*.md"),
                                                                 recursive=True))
    return [f for f in files if os.path.exists(f)]


# ------------------------------------------------------------------ plots

def plot_all(bs):
    """One PNG per section with a size sweep: a panel per op, a line per impl
    (busbw GB/s, or us for latency ops), log-scaled sizes."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    os.makedirs(PLOTS, exist_ok=True)
    written = []
    for shape, b in sorted(bs.items()):
        for name, sec in sorted(b.sections.items()):
            ops, points = [], {}
            for r in sec["rows"]:
                points[(r["op"], r["impl"])] = points.get((r["op"], r["impl"]), 0) + 1
            for (op, _), n in points.items():
                if n >= 3 and op not in ops:
                    ops.append(op)
            if not ops:
                continue
            cols = min(len(ops), 4)
            rows = math.ceil(len(ops) / cols)
            fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False)
            for ax, op in zip(axes.flat, ops):
                latency = is_latency(op)
                impls = []
                for r in sec["rows"]:
                    if r["op"] == op and r["impl"] not in impls:
                        impls.append(r["impl"])
                for impl in impls:
                    pts = sorted((r["bytes"], r["time_us"] if latency else r["busbw_gbps"])
                                 for r in sec["rows"] if r["op"] == op and r["impl"] == impl)
                    ours = impl.startswith("nvst") or impl == "ours"
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3,
                            linewidth=2.2 if ours else 1.2, label=impl)
                ax.set_xscale("log", base=2)
                if latency or name.startswith("coll"):
                    ax.set_yscale("log")
                ax.set_title(op, fontsize=9)
                ax.set_xlabel("bytes", fontsize=8)
                ax.set_ylabel("us" if latency else "busbw GB/s", fontsize=8)
                ax.tick_params(labelsize=7)
                ax.grid(True, which="major", alpha=0.3)
                ax.legend(fontsize=6)
            for ax in list(axes.flat)[len(ops):]:
                ax.set_visible(False)
            fig.suptitle(f"{b.machine()}, {str(b.doc['date'])[:10]}: {sec['command']}", fontsize=10)
            fig.tight_layout()
            path = os.path.join(PLOTS, f"{shape}-{name}.png")
            fig.savefig(path, dpi=90, metadata={"Software": None})
            plt.close(fig)
            written.append(os.path.relpath(path, ROOT))
    return written


# ------------------------------------------------------------------- main

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="fail where README/docs differ from the baselines")
    ap.add_argument("--no-plots", action="store_true", help="rewrite the tables only")
    a = ap.parse_args(argv)
    try:
        bs = load_baselines()
        stale = []
        for path in documents():
            with open(path) as f:
                text = f.read()
            new = render_text(text, bs, os.path.relpath(path, ROOT))
            if new == text:
                continue
            if a.check:
                stale.append(os.path.relpath(path, ROOT))
            else:
                with open(path, "w") as f:
                    f.write(new)
                print(f"render_results: wrote {os.path.relpath(path, ROOT)}")
    except (OSError, KeyError, ValueError, json.JSONDecodeError) as e:
        print(f"render_results: {e}", file=sys.stderr)
        return 1
    if a.check:
        if stale:
            print("render_results: these differ from bench/baselines/ (run scripts/render_results.py): "
                  + ", ".join(stale), file=sys.stderr)
            return 1
        print("render_results: README and docs match bench/baselines/")
        return 0
    if not a.no_plots:
        for p in plot_all(bs):
            print(f"render_results: wrote {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
