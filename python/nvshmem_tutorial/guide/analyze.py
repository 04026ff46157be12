"""From measurements to a decision: for each operation, which implementation
is fastest at each size, where that changes (crossovers), and the decision
tree those imply. Torch-free: it reads results documents (results.py)."""
from __future__ import annotations

from typing import Iterable

# Operation families of the guide, and what each benchmark calls them.
FAMILIES = ("p2p", "all_reduce", "all_gather", "broadcast")
_OP_NAMES = {"put": "p2p", "p2p": "p2p"}
# Who implemented a row: ours (any nvst variant), NCCL, PyTorch's symmetric
# memory, NVSHMEM; other impls (cuda_ipc_ce, ...) are left out of the tree.
_WHO = (("nvst", "ours"), ("nccl", "NCCL"), ("torch_symm", "torch symmetric memory"), ("nvshmem", "NVSHMEM"))


def family(op: str) -> str | None:
    """The guide's family of a row's op ("all_reduce_graph" -> "all_reduce")."""
    base = op
    for suffix in ("_eager", "_graph"):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
    base = _OP_NAMES.get(base, base)
    return base if base in FAMILIES else None


def who(impl: str) -> str | None:
    for prefix, name in _WHO:
        if impl == prefix or impl.startswith(prefix + "_"):
            return name
    return None


def size_name(b: int) -> str:
    for unit, shift in (("GB", 30), ("MB", 20), ("KB", 10)):
        if b >= 1 << shift and b % (1 << shift) == 0:
            return f"{b >> shift} {unit}"
    return f"{b} B"


def best_by_size(rows: Iterable[dict]) -> dict[str, dict[int, dict[str, float]]]:
    """{family: {bytes: {who: best time_us}}}, rows with wrong bytes left out.
    Of an op measured eagerly and in graphs, the eager rows (what a caller
    sees without capturing) are used when both exist."""
    rows = [r for r in rows if not r.get("wrong") and r.get("time_us", 0) > 0]
    eager_ops = {family(r["op"]) for r in rows if r["op"].endswith("_eager")}
    out: dict[str, dict[int, dict[str, float]]] = {}
    for r in rows:
        fam, name = family(r["op"]), who(r["impl"])
        if fam is None or name is None or (r["op"].endswith("_graph") and fam in eager_ops):
            continue
        cell = out.setdefault(fam, {}).setdefault(int(r["bytes"]), {})
        cell[name] = min(cell.get(name, float("inf")), float(r["time_us"]))
    return out


def ranges(per_size: dict[int, dict[str, float]]) -> list[tuple[int, int, str, float]]:
    """Runs of sizes with the same winner: (first bytes, last bytes, winner,
    its best speed-up over the runner-up in the run)."""
    out: list[tuple[int, int, str, float]] = []
    for b in sorted(per_size):
        times = per_size[b]
        if len(times) < 2:
            continue
        ranked = sorted(times.items(), key=lambda kv: kv[1])
        winner, margin = ranked[0][0], ranked[1][1] / ranked[0][1]
        if out and out[-1][2] == winner:
            first, _, w, m = out[-1]
            out[-1] = (first, b, w, max(m, margin))
        else:
            out.append((b, b, winner, margin))
    return out


def tree(doc: dict) -> list[str]:
    """The decision, as lines: per family the winner by size range, the
    crossovers, and the rule they imply."""
    per_family = best_by_size(doc.get("rows", []))
    lines = []
    for fam in FAMILIES:
        if fam not in per_family:
            lines.append(f"{fam}: not measured here")
            continue
        rs = ranges(per_family[fam])
        if not rs:
            lines.append(f"{fam}: one implementation only; nothing to compare")
            continue
        lines.append(f"{fam}:")
        for first, last, w, m in rs:
            span = size_name(first) if first == last else f"{size_name(first)} .. {size_name(last)}"
            lines.append(f"  {span:>20}: {w} (up to {m:.2f}x faster than the next)")
        for (_, last, w0, _), (first, _, w1, _) in zip(rs, rs[1:]):
            lines.append(f"  crossover between {size_name(last)} and {size_name(first)}: {w0} -> {w1}")
        if len(rs) == 1:
            lines.append(f"  => use {rs[0][2]} at every measured size")
        else:
            rule = "; ".join(f"{w} up to {size_name(last)}" for _, last, w, _ in rs[:-1])
            rule += f"; {rs[-1][2]} above"
            lines.append(f"  => {rule}")
    return lines
