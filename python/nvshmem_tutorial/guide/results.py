"""Benchmark results as JSON, in the shape every benchmark of the project
writes (tools/nvst/report.cpp): machine, gpus, date, commit, versions,
label, notes, rows of {op, impl, bytes, time_us, algbw_gbps, busbw_gbps,
wrong}. ``write_results`` is the one place the guide writes them."""
from __future__ import annotations

import datetime
import glob
import json
import os
import socket
import subprocess
from typing import Any, Iterable, Optional

from .analyze import family


def commit() -> str:
    """This checkout's commit (12 hex digits), or "unknown". NVST_COMMIT
    names it where the tree is a copy without its history (scripts/bench.sh)."""
    if os.environ.get("NVST_COMMIT"):
        return os.environ["NVST_COMMIT"]
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        out = subprocess.run(["git", "-C", here, "rev-parse", "--short=12", "HEAD"], capture_output=True,
                             text=True, timeout=10)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def document(rows: Iterable[dict], gpus: list[str], versions: dict[str, Any], label: str,
             notes: Iterable[str] = ()) -> dict:
    """The JSON document for ``rows`` measured on this host."""
    doc: dict[str, Any] = {
        "machine": f"{socket.gethostname()} " + (f"({len(gpus)}x {gpus[0]})" if gpus else "(no GPU)"),
        "gpus": list(gpus),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": commit(),
        "versions": versions,
        "label": label,
        "rows": [],
    }
    notes = list(notes)
    if notes:
        doc["notes"] = notes
    for r in rows:
        doc["rows"].append({k: r[k] for k in ("op", "impl", "bytes", "time_us", "algbw_gbps", "busbw_gbps", "wrong")})
    return doc


# What every row carries: scripts/baseline.py refuses a result whose rows
# lack any of these, so a document written here can become a baseline section.
ROW_KEYS = ("op", "impl", "bytes", "time_us", "algbw_gbps", "busbw_gbps", "wrong")


def write_results(path: str, doc: dict) -> None:
    """Writes a results document; the guide's only writer. It is a result in
    the shape ``scripts/baseline.py add`` takes into a baseline (which
    ``scripts/bench.sh --json`` does, as section ``guide``)."""
    for i, row in enumerate(doc.get("rows", [])):
        missing = [k for k in ROW_KEYS if k not in row]
        if missing:
            raise ValueError(f"results row {i} lacks {missing}")
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"# wrote {path}")


def _sections_used(doc: dict) -> list[str]:
    """Of a baseline (sections of results, scripts/baseline.py), the sections
    the tree is drawn from: the guide's own measurement where it has one,
    else every section measured with default settings (no env: a run with
    NVST_NODE_SIZE or a forced algorithm answers another question) that has
    rows of the guide's operations."""
    sections = doc.get("sections") or {}
    multi = {name: s for name, s in sections.items()
             if isinstance(s, dict) and len(s.get("gpus") or []) >= 2
             and any(family(str(r.get("op", ""))) for r in s.get("rows") or [])}
    if "guide" in multi:
        return ["guide"]
    return sorted(name for name, s in multi.items() if not s.get("env"))


def _as_results(doc: dict) -> Optional[tuple[dict, list[str]]]:
    """A file's measurement of two GPUs or more as one results document, and
    the baseline sections it comes from ([] for a plain result); None if it
    has none."""
    if not isinstance(doc, dict):
        return None
    if "sections" not in doc:
        if len(doc.get("gpus") or []) < 2 or not doc.get("rows"):
            return None
        return doc, []
    used = _sections_used(doc)
    if not used:
        return None
    secs = [doc["sections"][n] for n in used]
    newest = max(secs, key=lambda s: str(s.get("date") or ""))
    rows = [r for s in secs for r in s["rows"]]
    merged = {k: newest.get(k) for k in ("machine", "gpus", "date", "commit", "versions", "label")}
    merged["rows"] = rows
    return merged, used


def newest_multi_gpu(where: str) -> Optional[tuple[str, dict]]:
    """The newest measurement of two GPUs or more among ``where`` (a JSON
    file, or a folder of them: guide results or bench/baselines files), as
    (path, results document); None if none. From a baseline the document is
    the rows of the sections the tree is drawn from (``sections`` names
    them), with the newest one's machine, date and commit."""
    paths = [where] if os.path.isfile(where) else sorted(glob.glob(os.path.join(where, "*.json")))
    best = None
    for p in paths:
        try:
            with open(p) as f:
                found = _as_results(json.load(f))
        except (OSError, ValueError):
            continue
        if found is None:
            continue
        doc, used = found
        if used:
            doc["sections"] = used
        if best is None or str(doc.get("date", "")) > str(best[1].get("date", "")):
            best = (p, doc)
    return best
