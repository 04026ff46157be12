"""The PyTorch half on GPUs: every check of tests/python/torch_job.py is a
pytest item, at world sizes 1, 2 and 4, so a failure names the check.

The `torch_job` fixture starts the ranks as torchrun does (one job per world
size, every check in it, since the checks are collective and a job's start
costs seconds), and each item reads its check's outcome on every rank.
Where there are fewer GPUs than ranks, the ranks share them
(NVST_TEST_SHARE_GPUS=1, torch.distributed on gloo) and the checks that need
a GPU per rank skip. The job's own knobs pass through: NVST_NODE_SIZE=1
(logical nodes), NVST_BACKEND=nvshmem, NVST_TEST_SIDE_STREAM=1. Everything
skips without PyTorch or without a GPU (CI has neither).
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

HERE = Path(__file__).resolve().parent
JOB = HERE / "torch_job.py"
EXAMPLES = HERE.parent.parent / "examples"
WORLD_SIZES = [1, 2, 4]
# NVLink multicast stays off (shared GPU hosts; see README).
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def check_names() -> list[str]:
    """The names in torch_job.py's @check("...") decorators, read without
    running it (collection needs neither PyTorch nor a GPU)."""
    names = []
    for node in ast.walk(ast.parse(JOB.read_text())):
        if isinstance(node, ast.FunctionDef):
            for d in node.decorator_list:
                if isinstance(d, ast.Call) and getattr(d.func, "id", "") == "check" and d.args:
                    names.append(ast.literal_eval(d.args[0]))
    return names


def slug(name: str) -> str:
    """A test id from a check's name: 'ep.Buffer normal mode equals ...' -> 'ep_buffer_normal_mode_equals'."""
    words = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_").split("_")
    return "_".join(words[:5])


def visible_gpus() -> int:
    torch = pytest.importorskip("torch")
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


class JobResult:
    """One job's outcome: each rank's records by check name, and its log."""

    def __init__(self, world: int, returncode: int, log: str, records: list[dict[str, dict[str, str]]]):
        self.world = world
        self.returncode = returncode
        self.log = log
        self.records = records

    def require(self, name: str) -> None:
        """Passes if every rank passed `name`; skips if every rank skipped it; fails naming the ranks."""
        outcomes = [r.get(name) for r in self.records]
        if all(o is not None and o["outcome"] == "skip" for o in outcomes):
            pytest.skip(outcomes[0]["detail"] if outcomes[0] else "skipped")
        bad = []
        for rank, o in enumerate(outcomes):
            if o is None:
                bad.append(f"rank {rank}: no result (the job exited with {self.returncode} before this check)")
            elif o["outcome"] != "pass":
                bad.append(f"rank {rank}: {o['outcome']}\n{o['detail']}")
        if bad:
            tail = self.log[-6000:] if any(o is None for o in outcomes) else ""
            pytest.fail("\n".join(bad) + (f"\n--- job output (tail) ---\n{tail}" if tail else ""), pytrace=False)


@pytest.fixture(scope="session")
def torch_job(tmp_path_factory: pytest.TempPathFactory) -> Callable[[int], JobResult]:
    """run(world) -> JobResult: torch_job.py as `world` ranks under torchrun,
    once per world size in the session."""
    gpus = visible_gpus()
    if gpus == 0:
        pytest.skip("needs a GPU")
    done: dict[int, JobResult] = {}

    def run(world: int) -> JobResult:
        if world in done:
            return done[world]
        results = tmp_path_factory.mktemp(f"torch_job_{world}") / "checks"
        env = dict(os.environ, **NO_MULTICAST, NVST_TEST_RESULTS=str(results),
                   NVST_DEVICE_TIMEOUT_S=os.environ.get("NVST_DEVICE_TIMEOUT_S", "60"))
        if gpus < world:
            env["NVST_TEST_SHARE_GPUS"] = "1"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world}", str(JOB)]
        try:
            r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
            code, log = r.returncode, r.stdout + r.stderr
        except subprocess.TimeoutExpired as e:
            out = b"".join(x if isinstance(x, bytes) else x.encode() for x in (e.stdout, e.stderr) if x)
            code, log = -1, f"torchrun did not finish within {e.timeout} s\n{out.decode(errors='replace')}"
        records = []
        for rank in range(world):
            path = Path(f"{results}.{rank}")
            lines = path.read_text().splitlines() if path.exists() else []
            records.append({rec["name"]: rec for rec in map(json.loads, lines)})
        done[world] = JobResult(world, code, log, records)
        return done[world]

    return run


@pytest.mark.parametrize("name", check_names(), ids=slug)
@pytest.mark.parametrize("world", WORLD_SIZES)
def test_torch_check(torch_job: Callable[[int], JobResult], world: int, name: str) -> None:
    torch_job(world).require(name)


@pytest.mark.parametrize("example", ["moe_training.py", "moe_inference_ll.py"])
def test_moe_example_checks_itself(example: str) -> None:
    """The MoE examples compare their results with a dense layer and exit 1
    on a mismatch; 2 ranks, sharing the GPU where there is only one."""
    if visible_gpus() < 1:
        pytest.skip("needs a GPU")
    env = dict(os.environ, **NO_MULTICAST)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(EXAMPLES / example)]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    print(r.stdout[-20000:])
    print(r.stderr[-8000:], file=sys.stderr)
    assert r.returncode == 0, f"torchrun exited with {r.returncode}"
    assert "FAIL" not in r.stdout and r.stdout.count("PASS") >= 10, "a check failed or did not run"
