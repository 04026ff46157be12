"""What the torchrun jobs of this folder share (torch_job.py,
nvshmem4py_job.py, pplx_job.py, ...): joining torch.distributed, a check of
once-rounded sums (also used by the CPU tests), and named checks that print
PASS or FAIL (with the traceback) per rank, count the failures, and end
with a barrier so the ranks move to the next check together. With
NVST_TEST_RESULTS=FILE each rank also appends one JSON line per check to
FILE.<rank> (test_torch_gpu.py reads them: one pytest item per check)."""
import json
import os
import traceback

import torch
import torch.distributed as dist


def join_torch(local_rank, share):
    """Selects the rank's GPU and joins torch.distributed: on NCCL, or on gloo
    when ranks share GPUs (share; NCCL wants a GPU per rank). Returns the
    device."""
    dev = torch.device("cuda", local_rank % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    if share:
        dist.init_process_group("gloo")
    else:
        dist.init_process_group("nccl", device_id=dev)
    return dev


class Checks:
    def __init__(self, rank, barrier):
        self.rank = rank
        self.barrier = barrier
        self.failures = []
        results = os.environ.get("NVST_TEST_RESULTS")
        self.results = f"{results}.{rank}" if results else None

    def record(self, name, outcome, detail=""):
        """One JSON line {name, outcome: pass|fail|skip, detail} to the results file."""
        if self.results:
            with open(self.results, "a") as f:
                f.write(json.dumps({"name": name, "outcome": outcome, "detail": detail}) + "\n")

    def __call__(self, name, run=True):
        """Decorator: runs the function now as the check `name` (unless
        run is False) and returns it."""
        def decorate(fn):
            if not run:
                self.record(name, "skip", "not in this mode (ranks sharing a GPU, or logical nodes)")
                return fn
            try:
                fn()
                print(f"[rank {self.rank}] PASS {name}", flush=True)
                self.record(name, "pass")
            except Exception as e:  # noqa: BLE001 - reported, counted
                self.failures.append(name)
                print(f"[rank {self.rank}] FAIL {name}: {e}\n{traceback.format_exc()}", flush=True)
                self.record(name, "fail", traceback.format_exc())
            torch.cuda.synchronize()
            self.barrier()
            return fn
        return decorate

    def done(self):
        """Prints the rank's verdict; returns the failure count (the exit status)."""
        print(f"[rank {self.rank}] DONE {len(self.failures)} failure(s)", flush=True)
        return len(self.failures)


def assert_rounded_once(got, exact, dtype, what):
    """got (any float dtype) against exact (float64, same shape): each value
    within one unit in the last place of `dtype` of the exact one, as an fp32
    sum rounded once to dtype is (half a unit, plus the fp32 sum's own
    error). A NaN anywhere fails."""
    fi = torch.finfo(dtype)
    exact = exact.to(torch.float64)
    tol = fi.eps * exact.abs().clamp(min=fi.smallest_normal)
    err = (got.to(torch.float64) - exact).abs()
    bad = ~(err <= tol)
    if bool(bad.any()):
        i = int(bad.flatten().nonzero()[0])
        raise AssertionError(f"{what}: {int(bad.sum())} of {bad.numel()} values are more than one {dtype} unit in "
                             f"the last place from the exact sum; first at flat index {i}: "
                             f"{float(got.flatten()[i])} vs {float(exact.flatten()[i])}")


def start_job():
    """A torchrun rank of a job of checks: (rank, world, device, checks).
    Ranks share GPUs with NVST_TEST_SHARE_GPUS=1 (torch.distributed on gloo)."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dev = join_torch(int(os.environ.get("LOCAL_RANK", "0")), os.environ.get("NVST_TEST_SHARE_GPUS") == "1")
    return rank, world, dev, Checks(rank, dist.barrier)

