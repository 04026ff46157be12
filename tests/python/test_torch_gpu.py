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
import re
from pathlib import Path
from typing import Callable

import pytest
from launcher import HERE, ROOT, Job, require_gpus, torchrun

JOB = HERE / "torch_job.py"
EXAMPLES = ROOT / "examples"
WORLD_SIZES = [1, 2, 4]


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


class JobResult:
    """One job's outcome: each rank's records by check name, and the job."""

    def __init__(self, job: Job, records: list[dict[str, dict[str, str]]]):
        self.job = job
        self.records = records

    def require(self, name: str) -> None:
        """Passes if every rank passed `name`; skips if every rank skipped it; fails naming the ranks."""
        outcomes = [r.get(name) for r in self.records]
        if all(o is not None and o["outcome"] == "skip" for o in outcomes):
            pytest.skip(outcomes[0]["detail"] if outcomes[0] else "skipped")
        bad = []
        for rank, o in enumerate(outcomes):
            if o is None:
                bad.append(f"rank {rank}: no result (the job exited with {self.job.returncode} before this check)")
            elif o["outcome"] != "pass":
                bad.append(f"rank {rank}: {o['outcome']}\n{o['detail']}")
        if bad:
            tail = self.job.log[-6000:] if any(o is None for o in outcomes) else ""
            pytest.fail("\n".join(bad) + (f"\n--- job output (tail) ---\n{tail}" if tail else ""), pytrace=False)


@pytest.fixture(scope="session")
def torch_job(tmp_path_factory: pytest.TempPathFactory) -> Callable[[int], JobResult]:
    """run(world) -> JobResult: torch_job.py as `world` ranks under torchrun,
    once per world size in the session."""
    require_gpus(1)
    done: dict[int, JobResult] = {}

    def run(world: int) -> JobResult:
        if world in done:
            return done[world]
        results = tmp_path_factory.mktemp(f"torch_job_{world}") / "checks"
        job = torchrun(JOB, world, env={"NVST_TEST_RESULTS": str(results)}, echo=False)
        records = []
        for rank in range(world):
            path = Path(f"{results}.{rank}")
            lines = path.read_text().splitlines() if path.exists() else []
            records.append({rec["name"]: rec for rec in map(json.loads, lines)})
        done[world] = JobResult(job, records)
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
    out = torchrun(EXAMPLES / example, 2, timeout=600).require().stdout
    assert out.count("PASS") >= 10, "a check did not run"
