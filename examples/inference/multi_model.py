"""Multi-model serving from symmetric memory: three models' weights stay
resident in the heap; rank 0 serves requests for any of them, switching by
name without copying weights (it uses views of the resident banks), while
rank 1 hot-swaps one model's weights into rank 0's heap, one-sidedly.
Every answer is checked against the same model run on one rank with plain
tensors, before and after the swap.

    torchrun --nproc_per_node=2 examples/inference/multi_model.py   (PYTHONPATH=build/python)
"""
import time
import zlib

import torch
import torch.distributed as dist

from _job import Timer, finish, join
from nvshmem_tutorial.inference import ModelStore

MODELS = {"small": {"w1": (64, 96), "w2": (96, 64)},
          "large": {"w1": (64, 512), "w2": (512, 64)},
          "wide": {"w1": (64, 1024), "w2": (1024, 64)}}


def weights(name, version, dev):
    g = torch.Generator().manual_seed(zlib.crc32(name.encode()) + version)  # the same in every process
    return {p: (torch.randn(*shape, generator=g) / shape[0] ** 0.5).to(dev) for p, shape in MODELS[name].items()}


def forward(params, x):
    return torch.relu(x @ params["w1"]) @ params["w2"]


def main():
    rank, world, dev = join()
    assert world >= 2, "run with 2 ranks or more"
    store = ModelStore(MODELS)
    for name in MODELS:
        store.load(name, weights(name, 0, dev))
    dist.barrier()
    failures, timer, swapped_at = [], Timer(), None
    if rank == 0:
        resident = {n: store.params(n)["w1"].data_ptr() for n in MODELS}
        deadline, step = time.monotonic() + 60, 0
        while store.version("small") == 0:  # serve while rank 1 swaps "small"
            name = ("large", "wide")[step % 2]
            x = torch.randn(8, 64, generator=torch.Generator().manual_seed(step)).to(dev)
            with timer:
                y = forward(store.params(name), x)
            if not torch.allclose(y, forward(weights(name, 0, dev), x), atol=1e-4):
                failures.append(f"{name} at request {step}")
            if store.params(name)["w1"].data_ptr() != resident[name]:
                failures.append(f"{name}'s weights moved")
            step += 1
            if time.monotonic() > deadline:
                failures.append("the hot swap never arrived")
                break
        swapped_at = step
        for i, name in enumerate(["small", "large", "small", "wide"] * 4):
            x = torch.randn(8, 64, generator=torch.Generator().manual_seed(1000 + i)).to(dev)
            with timer:
                y = forward(store.params(name), x)
            want = forward(weights(name, 1 if name == "small" else 0, dev), x)
            if not torch.allclose(y, want, atol=1e-4):
                failures.append(f"{name} after the swap")
    elif rank == 1:
        time.sleep(0.2)  # let rank 0 serve a while first
        t0 = time.perf_counter()
        store.hot_swap("small", weights("small", 1, dev), pe=0)
        print(f"rank 1: hot swap of 'small' into rank 0 took {(time.perf_counter() - t0) * 1e6:.0f} us")
    dist.barrier()
    if rank == 0:
        print(f"rank 0: served {len(timer.steps)} requests over 3 resident models ({swapped_at} before the swap); "
              f"{timer.summary()}; {'PASS' if not failures else 'FAIL ' + '; '.join(failures[:5])}")
    finish(not failures, store)


if __name__ == "__main__":
    main()
