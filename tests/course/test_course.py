"""The course's programs: every lesson and every exercise solution runs and
prints exactly the expected output that its chapter shows
(examples/course/expected/NAME.txt, included in docs/course/ by the site).

Host lessons run on host-memory PEs (no GPU, no PyTorch): CI runs them.
GPU lessons run under torchrun and skip without PyTorch or a GPU; the
DeepSpeed and Megatron-core lessons also skip without their package."""
from __future__ import annotations

import functools
import importlib.util
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COURSE = ROOT / "examples" / "course"
EXPECTED = COURSE / "expected"


@dataclass(frozen=True)
class Program:
    name: str              # file stem under examples/course (and solutions/)
    nproc: int = 0         # 0: a host program (it starts its own PEs); else torchrun ranks
    needs: str = ""        # a Python package the program needs besides torch


# Roadmap order. Host programs start their PEs themselves (launch); the rest
# are torchrun jobs of nproc ranks that share one GPU where there is only one.
PROGRAMS = [
    Program("1.1_init"), Program("1.2_symmetric"), Program("1.3_put_get"), Program("1.4_sync"),
    Program("1.5_ring"), Program("1.6_torch", nproc=2), Program("1.7_errors"),
    Program("2.1_buffers"), Program("2.2_allreduce"), Program("2.3_allgather"), Program("2.4_overlap"),
    Program("2.5_multinode"), Program("2.6_profiling"), Program("2.7_memory"),
    Program("3.1_topology"), Program("3.2_custom"), Program("3.3_compare"),
    Program("3.4_deepspeed", nproc=2, needs="deepspeed"), Program("3.5_megatron", nproc=2, needs="megatron.core"),
    Program("3.6_multitenant"), Program("3.7_cross_platform"),
]


def _cases() -> list:
    out = []
    for p in PROGRAMS:
        out.append(pytest.param(p, COURSE / f"{p.name}.py", EXPECTED / f"{p.name}.txt", id=p.name))
        out.append(pytest.param(p, COURSE / "solutions" / f"{p.name}.py", EXPECTED / f"{p.name}.solution.txt",
                                id=f"{p.name}-solution"))
    return out


def _gpus() -> int:
    try:
        import torch
    except ImportError:
        return -1
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _run(p: Program, path: Path) -> subprocess.CompletedProcess:
    # NVLink multicast stays off everywhere (shared GPU hosts).
    env = dict(os.environ, NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1",
               NVST_TIMEOUT_S=os.environ.get("NVST_TIMEOUT_S", "30"), PYTHONUNBUFFERED="1")
    if p.nproc == 0:
        cmd = [sys.executable, str(path)]
    else:
        gpus = _gpus()
        if gpus < 0:
            pytest.skip("needs PyTorch")
        if gpus == 0:
            pytest.skip("needs a GPU")
        if p.needs and importlib.util.find_spec(p.needs.split(".")[0]) is None:
            pytest.skip(f"needs the {p.needs} package (scripts/course_wheels.sh)")
        if gpus < p.nproc:
            env["NVST_TEST_SHARE_GPUS"] = "1"  # the ranks share the GPU, torch.distributed on gloo
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={p.nproc}", str(path)]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)


@functools.cache
def _host_runs() -> dict[Path, subprocess.CompletedProcess]:
    """Every host program, a few at a time: each spends most of its time
    starting processes and waiting on its peers, not computing, so running
    them side by side cuts the wall time (NVST_COURSE_JOBS, default 3)."""
    paths = [c.values[1] for c in _cases() if c.values[0].nproc == 0 and c.values[1].is_file()]
    programs = {c.values[1]: c.values[0] for c in _cases()}
    with ThreadPoolExecutor(max_workers=int(os.environ.get("NVST_COURSE_JOBS", "3"))) as pool:
        return dict(zip(paths, pool.map(lambda p: _run(programs[p], p), paths)))


@pytest.mark.parametrize(("program", "path", "expected"), _cases())
def test_program_prints_its_expected_output(program: Program, path: Path, expected: Path) -> None:
    assert path.is_file(), f"{path} is missing"
    assert expected.is_file(), f"{expected} is missing (the chapter includes it)"
    r = _host_runs()[path] if program.nproc == 0 else _run(program, path)
    assert r.returncode == 0, f"{path.name} exited with {r.returncode}\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
    assert r.stdout == expected.read_text(), (
        f"{path.name} printed\n{r.stdout}\ninstead of {expected.name}:\n{expected.read_text()}")


def test_every_program_is_listed_and_sized() -> None:
    """Each lesson is one standalone program of 50-250 lines (the smallest
    code that shows its idea), and nothing in examples/course is untested."""
    listed = {p.name for p in PROGRAMS}
    for folder in (COURSE, COURSE / "solutions"):
        found = {f.stem for f in folder.glob("*.py")}
        assert found == listed, f"{folder}: not listed {sorted(found - listed)}, missing {sorted(listed - found)}"
    for p in PROGRAMS:
        lines = len((COURSE / f"{p.name}.py").read_text().splitlines())
        assert 50 <= lines <= 250, f"{p.name}.py has {lines} lines; a lesson program has 50-250"


def test_every_chapter_includes_its_program_output_and_solution() -> None:
    chapters = {f.name.split("-")[0]: f.read_text() for f in (ROOT / "docs" / "course").glob("[0-9].[0-9]-*.md")}
    for p in PROGRAMS:
        number = p.name.split("_")[0]
        assert number in chapters, f"no chapter docs/course/{number}-*.md"
        text = chapters[number]
        for include in (f"examples/course/{p.name}.py", f"examples/course/expected/{p.name}.txt",
                        f"examples/course/solutions/{p.name}.py"):
            assert f'--8<-- "{include}"' in text, f"chapter {number} does not include {include}"
