"""ep.Buffer across logical nodes with a copy queued right behind each call
(stall_job.py), over shm and tcp, 2 ranks sharing one GPU: every check
passes within its time limit and the proxy reports no stall. The Buffer
does not synchronise across nodes: the data path makes no CUDA call in the
user's process, so nothing queued behind a call can hold it up. Skips
without PyTorch or a GPU (CI has neither)."""
import pytest
from launcher import HERE, torchrun

STALL_REPORTS = ("stuck for", "has not finished after", "stalled")


@pytest.mark.parametrize("provider", ["shm", "tcp;ofi_rxm"])
def test_copies_behind_ep_calls_across_nodes(provider):
    env = {"NVST_NODE_SIZE": "1", "NVST_FABRIC_PROVIDER": provider, "NVST_DEVICE_TIMEOUT_S": "15",
           "NVST_TIMEOUT_S": "60"}
    job = torchrun(HERE / "stall_job.py", 2, share=True, env=env, timeout=300).require("DONE 0 failure(s)", count=2)
    reports = [line for line in job.stderr.splitlines() if any(r in line.lower() for r in STALL_REPORTS)]
    assert not reports, "the proxy reported a stall:\n" + "\n".join(reports[:5])
