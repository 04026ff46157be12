#!/usr/bin/env python3
"""Lines up the proxy traces of a sender and a target (NVST_PROXY_TRACE=PREFIX
writes PREFIX.RANK, see src/transport/proxy_trace.hpp) and prints, for the
puts of one size, the median time of each step of each piece after the put
was taken by the sender's proxy, in microseconds.

With --pingpong it reads `nvst bench host`'s signal ping-pong instead (the
bench writes its calls to PREFIX.app.RANK) and prints the median of each
step of a one-way signal, both directions together: the call, the command
taken and its piece posted (by the proxy thread, or by the calling thread
doing the proxy's work), the target's doorbell, the signal applied, the
waiter back.

Usage: proxy_trace.py PREFIX [--sender 0] [--target 1] [--bytes N] [--from host|kernel|any]
       proxy_trace.py PREFIX --pingpong
"""
import argparse
import bisect
import collections
import statistics
import sys


def read(path):
    with open(path) as f:
        for line in f:
            ns, what, pe, seq = line.split()
            yield int(ns), what, int(pe), int(seq)


def pingpong(prefix):
    """Median us of each step of a one-way signal in the bench's ping-pong."""
    app, ev = {}, {}
    for r in (0, 1):
        app[r] = collections.defaultdict(list)
        with open(f"{prefix}.app.{r}") as f:
            for line in f:
                ns, what = line.split()
                app[r][what].append(int(ns))
        ev[r] = collections.defaultdict(list)  # (what, pe) -> [ns]; (what, pe, seq) -> ns
        for ns, what, pe, seq in read(f"{prefix}.{r}"):
            ev[r][(what, pe)].append(ns)
            ev[r].setdefault((what, pe, seq), ns)
    seq_of = {}
    for r in (0, 1):
        for ns, what, pe, seq in read(f"{prefix}.{r}"):
            if what == "posted":
                seq_of[(r, ns)] = seq

    def first_after(times, t):
        i = bisect.bisect_left(times, t)
        return times[i] if i < len(times) else None

    steps = ["taken", "posted", "bell", "landed", "woke"]
    table = collections.defaultdict(list)
    for src in (0, 1):
        dst = 1 - src
        for call in app[src]["c"]:
            ret = first_after(app[src]["r"], call)
            taken = first_after(ev[src][("taken", dst)], call)
            posted = first_after(ev[src][("posted", dst)], call)
            if None in (ret, taken, posted):
                continue
            seq = seq_of[(src, posted)]
            bell = ev[dst].get(("bell", src, seq))
            landed = ev[dst].get(("landed", src, seq))
            if bell is None or landed is None:
                continue
            woke = first_after(app[dst]["w"], landed)
            if woke is None:
                continue
            times = [call, taken, posted, bell, landed, woke]
            for k, st in enumerate(steps):
                table[st].append((times[k + 1] - times[k]) / 1e3)
            table["signal_op returned"].append((ret - call) / 1e3)
            table["one way"].append((woke - call) / 1e3)
    if not table:
        sys.exit(f"no ping-pong rounds found in {prefix}.app.* and {prefix}.*")
    print(f"# {len(table['one way'])} one-way signals; median us of each step after the one before")
    for st in ["taken", "posted", "bell", "landed", "woke", "one way", "signal_op returned"]:
        v = sorted(table[st])
        print(f"{st:>20} {statistics.median(v):8.1f}  (p25 {v[len(v) // 4]:.1f}, p75 {v[3 * len(v) // 4]:.1f})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("prefix")
    ap.add_argument("--sender", type=int, default=0)
    ap.add_argument("--target", type=int, default=1)
    ap.add_argument("--bytes", type=int, default=None, help="only puts of this size (default: the largest)")
    ap.add_argument("--from", dest="origin", choices=["host", "kernel", "any"], default="any",
                    help="only puts issued by the host API or by kernels")
    ap.add_argument("--pingpong", action="store_true", help="nvst bench host's signal ping-pong instead of puts")
    a = ap.parse_args()
    if a.pingpong:
        return pingpong(a.prefix)
    snd = list(read(f"{a.prefix}.{a.sender}"))
    tgt = list(read(f"{a.prefix}.{a.target}"))

    # Sender: each put (taken) owns the pieces staged after it, until the next one.
    puts = []  # (taken_ns, bytes, [seqs], quiet_done_ns)
    for ns, what, pe, seq in snd:
        taken = {"host": ("taken",), "kernel": ("taken_dev",), "any": ("taken", "taken_dev")}[a.origin]
        if what in taken and pe == a.target:
            puts.append([ns, seq, [], None])
        elif what in ("taken", "taken_dev"):
            puts.append([ns, -1, [], None])  # another put (origin or target): owns what follows
        elif what == "staged" and pe == a.target and puts:
            puts[-1][2].append(seq)
        elif what == "quiet_done" and puts and puts[-1][3] is None:
            puts[-1][3] = ns
    mine = [p for p in puts if p[1] >= 0]  # -1: another put, which only ends the one before it
    if not mine:
        sys.exit(f"no puts from {a.origin} to PE {a.target} in {a.prefix}.{a.sender}")
    size = a.bytes if a.bytes is not None else max(p[1] for p in mine)
    puts = [p for p in mine if p[1] == size and p[2] and p[3] is not None]
    if not puts:
        sys.exit(f"no finished puts of {size} bytes from {a.origin} to PE {a.target}")

    # Every event of a piece (sender, seq), from either side.
    ev = collections.defaultdict(dict)
    for ns, what, pe, seq in snd:
        if pe == a.target and what in ("staged", "posted", "written"):
            ev[seq].setdefault(what, ns)
    for ns, what, pe, seq in tgt:
        if pe == a.sender and what in ("bell", "landing", "landed", "acked"):
            ev[seq].setdefault(what, ns)

    steps = ["staged", "posted", "bell", "written", "landing", "landed", "acked"]
    n_pieces = max(len(p[2]) for p in puts)
    table = collections.defaultdict(list)
    total = []
    for taken, _, seqs, done in puts:
        total.append((done - taken) / 1e3)
        for k, seq in enumerate(seqs):
            for st in steps:
                if st in ev[seq]:
                    table[(k, st)].append((ev[seq][st] - taken) / 1e3)
    print(f"# {len(puts)} puts of {size} bytes from {a.origin}, {n_pieces} pieces each; median us after the sender's proxy took the put")
    print("piece " + "".join(f"{st:>9}" for st in steps))
    for k in range(n_pieces):
        cells = []
        for st in steps:
            v = table.get((k, st))
            cells.append(f"{statistics.median(v):9.1f}" if v else f"{'-':>9}")
        print(f"{k:5d} " + "".join(cells))
    print(f"quiet released: {statistics.median(total):.1f} us (min {min(total):.1f}, max {max(total):.1f})")


if __name__ == "__main__":
    main()
