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


def commit() -> str:
    """This checkout's commit (12 hex digits), or "unknown"."""
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


def write_results(path: str, doc: dict) -> None:
    """Writes a results document; the guide's only writer."""
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"# wrote {path}")


def newest_multi_gpu(where: str) -> Optional[tuple[str, dict]]:
    """The newest results document with two GPUs or more among ``where``
    (a JSON file, or a folder of them), as (path, document); None if none."""
    paths = [where] if os.path.isfile(where) else sorted(glob.glob(os.path.join(where, "*.json")))
    best = None
    for p in paths:
        try:
            with open(p) as f:
                doc = json.load(f)
        except (OSError, ValueError):
            continue
        if not isinstance(doc, dict) or len(doc.get("gpus", [])) < 2 or not doc.get("rows"):
            continue
        if best is None or str(doc.get("date", "")) > str(best[1].get("date", "")):
            best = (p, doc)
    return best
