#!/usr/bin/env python3
"""Checks that each layer of libnvst compiles with only the include paths of
its own and the lower layers (src/CMakeLists.txt names them, lowest first).

Every source and header of a layer is compiled (C++: g++ -fsyntax-only;
CUDA: nvcc -E, which resolves every include without generating code) with
-I pointing at a folder that links only to the allowed layers, plus the
public headers (include/) and system libraries. An include of a higher
layer then fails with "No such file". A probe that includes a higher layer
on purpose must fail, so the check cannot pass by accident.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

CXX_SUFFIXES = {".cpp", ".hpp"}
CUDA_SUFFIXES = {".cu", ".cuh"}
# Compiled only against NVSHMEM's headers (the nvst_nvshmem library).
NVSHMEM_ONLY = {"runtime/heap_nvshmem.cpp"}
DEFAULT_DIRS = {"/usr/include", "/usr/local/include"}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", type=Path, required=True, help="repository root")
    p.add_argument("--layers", nargs="+", required=True, help="layers, lowest first")
    p.add_argument("--cxx", default="g++")
    p.add_argument("--nvcc", default="nvcc")
    p.add_argument("--system-include", nargs="*", default=[], help="CUDA, libfabric, hwloc headers")
    p.add_argument("--nvshmem-include", nargs="*", default=[], help="NVSHMEM headers, if found")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--timeout", type=float, default=120, help="seconds per compiler call")
    return p.parse_args()


def make_view(tmp: Path, layers: list[str], layer: str, src: Path) -> Path:
    """A folder linking to `layer` and the layers below it."""
    view = tmp / layer
    view.mkdir()
    for name in layers[: layers.index(layer) + 1]:
        (view / name).symlink_to(src / name, target_is_directory=True)
    return view


def command(args: argparse.Namespace, view: Path, path: Path, rel: str) -> list[str]:
    system = list(args.system_include) + (list(args.nvshmem_include) if rel in NVSHMEM_ONLY else [])
    # The compiler's own folders stay in its order (#include_next needs that).
    system = [d for d in system if d not in DEFAULT_DIRS]
    includes = [f"-I{view}", f"-I{args.root / 'include'}"] + [a for d in system for a in ("-isystem", d)]
    if rel in NVSHMEM_ONLY:
        includes.append("-DNVST_WITH_NVSHMEM=1")
    if path.suffix in CUDA_SUFFIXES:
        return [args.nvcc, "-std=c++20", "-E", "-x", "cu", "--expt-relaxed-constexpr", *includes, str(path), "-o",
                os.devnull]
    return [args.cxx, "-std=c++20", "-fsyntax-only", "-Wno-pragma-once-outside-header", "-x", "c++", *includes,
            str(path)]


def run(cmd: list[str], timeout: float) -> tuple[int, str]:
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return 1, f"timed out after {timeout:.0f} s"
    return r.returncode, r.stderr


def main() -> int:
    args = parse_args()
    args.root = args.root.resolve()
    src = args.root / "src"
    folders = sorted(p.name for p in src.iterdir() if p.is_dir())
    unknown = [f for f in folders if f not in args.layers]
    if unknown:
        print(f"src/ folders that are not layers: {', '.join(unknown)} (add them to NVST_LAYERS)")
        return 1
    with tempfile.TemporaryDirectory(prefix="nvst-layers-") as tmp_name:
        tmp = Path(tmp_name)
        jobs: list[tuple[str, list[str]]] = []
        skipped: list[str] = []
        for layer in args.layers:
            view = make_view(tmp, args.layers, layer, src)
            for path in sorted((src / layer).rglob("*")):
                rel = str(path.relative_to(src))
                if path.suffix not in CXX_SUFFIXES | CUDA_SUFFIXES:
                    continue
                if rel in NVSHMEM_ONLY and not args.nvshmem_include:
                    skipped.append(rel)
                    continue
                jobs.append((f"{layer}: {rel}", command(args, view, path, rel)))
        # The probe: the lowest layer including the highest must fail.
        probe = tmp / "probe.cpp"
        # (the highest layer that has a header of its own)
        top, header = next((layer, p) for layer in reversed(args.layers) for p in sorted((src / layer).iterdir())
                           if p.suffix in {".hpp", ".cuh"})
        probe.write_text(f'#include "{top}/{header.name}"\n')
        probe_cmd = command(args, tmp / args.layers[0], probe, "probe.cpp")

        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            results = list(pool.map(lambda j: (j[0], *run(j[1], args.timeout)), jobs))
        failed = [(name, err) for name, rc, err in results if rc != 0]
        for name, err in failed:
            print(f"FAIL {name}\n{err.strip()}\n")
        rc, _ = run(probe_cmd, args.timeout)
        if rc == 0:
            print(f"FAIL the probe: {args.layers[0]} including {top}/{header.name} compiled; the views leak")
            return 1
        for rel in skipped:
            print(f"skipped {rel} (NVSHMEM headers not found)")
        print(f"{len(jobs) - len(failed)}/{len(jobs)} files of {len(args.layers)} layers compile with only "
              f"their own and lower layers' include paths")
        return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
