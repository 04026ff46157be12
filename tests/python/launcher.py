"""The one way the GPU tests of this folder start a job: torchrun
(torch.distributed.run --standalone) with N ranks, bounded in time, its
output kept for the failure message. Imports neither PyTorch nor the
package, so the test files that use it still collect where neither is
installed (CI)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
# NVLink multicast stays off (shared GPU hosts; see README).
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def visible_gpus() -> int:
    """CUDA devices PyTorch sees; skips the test without PyTorch."""
    torch = pytest.importorskip("torch")
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def require_gpus(n: int = 1) -> int:
    """Skips the test unless at least n GPUs are visible; returns the count."""
    gpus = visible_gpus()
    if gpus < n:
        pytest.skip(f"needs {n} GPU(s), {gpus} visible")
    return gpus


@dataclass
class Job:
    """A finished (or stopped) torchrun: exit status (-1: stopped at its
    time limit) and output."""
    script: str
    nproc: int
    returncode: int
    stdout: str
    stderr: str

    @property
    def log(self) -> str:
        return self.stdout + self.stderr

    def tail(self, chars: int = 6000) -> str:
        return f"--- stdout (tail) ---\n{self.stdout[-chars:]}\n--- stderr (tail) ---\n{self.stderr[-chars:]}"

    def require(self, done: str | None = None, count: int = 1) -> Job:
        """Fails, with the output's tails, unless the job exited 0, printed
        no FAIL and printed `done` at least `count` times. Returns the job."""
        what = f"{Path(self.script).name} at {self.nproc} rank(s)"
        if self.returncode != 0:
            pytest.fail(f"{what}: torchrun exited with {self.returncode}\n{self.tail()}", pytrace=False)
        if "FAIL" in self.stdout:
            pytest.fail(f"{what}: a check failed\n{self.tail()}", pytrace=False)
        if done is not None and self.stdout.count(done) < count:
            pytest.fail(f"{what}: {done!r} printed {self.stdout.count(done)} time(s), expected {count}\n{self.tail()}",
                        pytrace=False)
        return self


def torchrun(script: str | os.PathLike, nproc: int, *, timeout: float = 900, share: bool | None = None,
             env: dict[str, str] | None = None, env_drop: Iterable[str] = (), echo: bool = True) -> Job:
    """Runs `script` as nproc ranks under torchrun from the repository root.
    Skips without a GPU. Ranks share GPUs (NVST_TEST_SHARE_GPUS=1: gloo)
    where fewer GPUs than ranks are visible, or always with share=True.
    Multicast is off, device waits are bounded (NVST_DEVICE_TIMEOUT_S, 60 s
    unless set) and the jobs import this folder's helpers (PYTHONPATH).
    `env` adds variables, `env_drop` removes some. At `timeout` seconds the
    whole process group is killed and the Job has returncode -1. With
    echo, the output's tails are printed (pytest shows them on failure)."""
    gpus = require_gpus(1)
    full = dict(os.environ, **NO_MULTICAST,
                NVST_DEVICE_TIMEOUT_S=os.environ.get("NVST_DEVICE_TIMEOUT_S", "60"),
                PYTHONPATH=os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p))
    if share or (share is None and gpus < nproc):
        full["NVST_TEST_SHARE_GPUS"] = "1"
    full.update(env or {})
    for name in env_drop:
        full.pop(name, None)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", str(script)]
    # A session of its own: at the time limit the ranks go too, not only torchrun.
    p = subprocess.Popen(cmd, env=full, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
        code = p.returncode
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        code = -1
        err += f"\ntorchrun did not finish within {timeout} s: its process group was killed"
    job = Job(str(script), nproc, code, out, err)
    if echo:
        print(out[-30000:])
        print(err[-8000:], file=sys.stderr)
    return job
