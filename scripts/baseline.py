#!/usr/bin/env python3
"""Baselines: one JSON per machine shape in bench/baselines/<gpu>-x<N>.json.

A baseline holds the latest full benchmark run of one machine shape. Each
benchmark is a section in the format `nvst bench --json` writes (machine,
gpus, date, commit, versions, notes, rows of op/impl/bytes/time_us/
algbw_gbps/busbw_gbps/wrong), plus the command and settings that produced
it. The file's header repeats the newest section's machine, date and commit
and gathers every version seen. `scripts/bench.sh --json` is the one writer;
scripts/render_results.py turns baselines into tables and plots.

    baseline.py shape                       prints <gpu>-x<N> for this machine
    baseline.py add FILE NAME RESULT.json --command CMD [--env K=V ...] [--version K=V ...] [--commit C]
"""
import argparse
import json
import os
import re
import subprocess
import sys

SCHEMA = 1


def gpu_slug(name):
    """'NVIDIA H200' -> 'h200', 'NVIDIA H100 80GB HBM3' -> 'h100'."""
    words = [w for w in re.split(r"[\s_]+", name.strip()) if w and w.lower() not in ("nvidia", "tesla")]
    if not words:
        raise ValueError(f"cannot make a name from GPU '{name}'")
    return re.sub(r"[^a-z0-9]", "", words[0].lower())


def machine_shape():
    """<gpu>-x<N> from nvidia-smi; 'host-x0' where no GPU is visible."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return "host-x0"
    names = [line.strip() for line in out.splitlines() if line.strip()]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() != "":
        names = names[:len([v for v in visible.split(",") if v.strip()])]
    return f"{gpu_slug(names[0])}-x{len(names)}" if names else "host-x0"


def from_torch_bench(doc):
    """nvshmem_tutorial.bench's JSON as a section: its tables become rows of
    the common format (op torch_p2p / torch_all_gather, one row per column).
    Its #wrong is counted per table row, over every column: each row gets it."""
    world = int(doc["world"])
    rows = []
    for r in doc["rows"]:
        nbytes = int(r["bytes"])
        for impl, us in r["us"].items():
            if r["table"] == "p2p":
                op, algbw = "torch_p2p", r["gbps"][impl]
                busbw = algbw
            elif r["table"] == "allgather":
                op, algbw = "torch_all_gather", world * nbytes / us / 1e3
                busbw = r["busbw"][impl]
            else:
                raise ValueError(f"unknown table '{r['table']}' in the torch bench JSON")
            rows.append({"op": op, "impl": impl, "bytes": nbytes, "time_us": us, "algbw_gbps": algbw,
                         "busbw_gbps": busbw, "wrong": int(r["wrong"])})
    notes = ["nvshmem_tutorial.bench: torch_p2p is rank 0 -> rank 1 (nccl: send/recv, ipc: torch's CUDA IPC "
             "handle and copy_, nvshmem: nvshmem4py's put, ours: nvshmem_put_tensor_async); torch_all_gather's "
             "bytes are per rank; #wrong counts a table row over all its columns"]
    if doc.get("shared_gpu"):
        notes.append("ranks shared one GPU: a correctness check, not a timing")
    return {"machine": f"{world}x {doc['gpu']}", "gpus": [doc["gpu"]] * world, "date": doc["date"],
            "commit": doc.get("commit"), "versions": {"torch": doc.get("torch"),
                                                      "nvshmem4py": bool(doc.get("nvshmem4py"))},
            "label": "", "notes": notes, "rows": rows}


def load_result(path):
    with open(path) as f:
        doc = json.load(f)
    if not isinstance(doc, dict) or not isinstance(doc.get("rows"), list):
        raise ValueError(f"{path}: not a benchmark result (no rows)")
    if "table" in (doc["rows"][0] if doc["rows"] else {}):
        return from_torch_bench(doc)
    need = {"op", "impl", "bytes", "time_us", "algbw_gbps", "busbw_gbps", "wrong"}
    for i, row in enumerate(doc["rows"]):
        missing = need - row.keys()
        if missing:
            raise ValueError(f"{path}: row {i} lacks {sorted(missing)}")
    return doc


def header_of(sections):
    """The file's header: the newest section's machine, date and commit, and
    every version any section recorded (the newest wins)."""
    newest = max(sections.values(), key=lambda s: s.get("date") or "")
    versions = {}
    for s in sorted(sections.values(), key=lambda s: s.get("date") or ""):
        versions.update({k: v for k, v in (s.get("versions") or {}).items() if v not in (None, "")})
    return {"machine": newest.get("machine"), "gpus": newest.get("gpus"), "date": newest.get("date"),
            "commit": newest.get("commit"), "versions": dict(sorted(versions.items()))}


def add(path, name, result, command, env, versions, commit=None):
    """Writes section `name` of baseline `path` (creating the file), keeping the others."""
    if not re.fullmatch(r"[a-z0-9_]+", name):
        raise ValueError(f"section name '{name}': use a-z, 0-9 and _")
    doc = {"schema": SCHEMA, "sections": {}}
    if os.path.exists(path):
        with open(path) as f:
            doc = json.load(f)
        if doc.get("schema") != SCHEMA:
            raise ValueError(f"{path}: schema {doc.get('schema')}, this script writes {SCHEMA}")
    section = load_result(result)
    section = {"command": command, "env": env, **section}
    section["versions"] = {**(section.get("versions") or {}), **versions}
    if commit and not section.get("commit"):
        section["commit"] = commit
    doc["sections"][name] = section
    doc["sections"] = dict(sorted(doc["sections"].items()))
    doc.update(header_of(doc["sections"]))
    ordered = {k: doc[k] for k in ("schema", "machine", "gpus", "date", "commit", "versions", "sections")}
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(ordered, f, indent=1, sort_keys=False)
        f.write("\n")
    os.replace(tmp, path)


def pairs(items, what):
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"{what} '{item}': expected KEY=VALUE")
        out[key] = value
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description="bench/baselines/ files: the machine's shape, adding a section")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("shape", help="print <gpu>-x<N> for the GPUs visible here")
    a = sub.add_parser("add", help="write one benchmark's JSON into a baseline as section NAME")
    a.add_argument("file")
    a.add_argument("name")
    a.add_argument("result")
    a.add_argument("--command", required=True, help="the command that produced RESULT")
    a.add_argument("--env", action="append", help="a setting of that command, KEY=VALUE")
    a.add_argument("--version", action="append", help="a version to record, KEY=VALUE")
    a.add_argument("--commit", help="the commit measured, where RESULT does not name it")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "shape":
            print(machine_shape())
        else:
            add(args.file, args.name, args.result, args.command, pairs(args.env, "--env"),
                pairs(args.version, "--version"), args.commit)
    except (OSError, ValueError, KeyError, json.JSONDecodeError) as e:
        print(f"baseline.py: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
