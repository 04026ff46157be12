"""The training patterns on host-memory PEs (no GPU): the real runtime,
its collectives and put_signal through the proxy, on CPU tensors, against
the plain references of training_checks.py. Skips without PyTorch (CI has
none); each job is bounded by launch's timeout."""
import functools

import pytest

pytest.importorskip("torch")
import nvshmem_tutorial as nt  # noqa: E402
import training_checks as tc  # noqa: E402

TIMEOUT = 240.0


def _run(check, args, rank):
    check(*args)
    return True


def launch(world, check, *args, env=None):
    assert nt.launch(world, functools.partial(_run, check, args), env=env, timeout=TIMEOUT) == [True] * world


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("kind", ["mlp", "transformer"])
def test_gradient_sync_equals_the_reference(world, kind):
    launch(world, tc.check_gradient_sync, kind)


def test_hierarchical_gradient_sync_over_two_logical_nodes():
    launch(4, tc.check_gradient_sync, "mlp", True, env={"NVST_NODE_SIZE": "2"})


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("kind", ["mlp", "transformer"])
def test_sharded_optimizer_equals_the_unsharded_one(world, kind):
    launch(world, tc.check_sharded_optimizer, kind)


@pytest.mark.parametrize("staleness", [0, 2])
def test_async_gradients_equal_sync_or_a_sequential_simulation(staleness):
    launch(2, tc.check_async, staleness)


def test_lock_free_deterministic_sum():
    launch(3, tc.check_lock_free, True)


@pytest.mark.parametrize("world,schedule,chunks", [(2, "1f1b", 1), (4, "1f1b", 1), (2, "interleaved", 2),
                                                   (4, "interleaved", 2)])
def test_pipeline_equals_the_sequential_model(world, schedule, chunks):
    launch(world, tc.check_pipeline, schedule, chunks)


@pytest.mark.parametrize("world", [2, 4])
def test_tensor_parallel_mlp_equals_the_plain_one(world):
    launch(world, tc.check_tensor_parallel)


def test_bad_input_fails_on_every_rank():
    launch(2, tc.check_bad_input, env={"NVST_SYMMETRIC_SIZE": "8M", "NVST_COLL_WORKSPACE": "1M"})
