"""The training patterns' arithmetic, without torch or a runtime (CI):
pipeline schedules against their simulator and the bubble formula,
bucketing and sharding."""
import pytest
from nvshmem_tutorial.training import buckets, schedules
from nvshmem_tutorial.training.schedules import Op


@pytest.mark.parametrize("ranks,microbatches", [(1, 1), (1, 5), (2, 1), (2, 4), (4, 3), (4, 8), (8, 16)])
def test_1f1b_runs_everything_once_with_the_ideal_bubble(ranks, microbatches):
    ops = schedules.schedule("1f1b", ranks, microbatches)
    sim = schedules.simulate(ops)  # raises on a deadlock or a missing/duplicate op
    assert all(len(o) == 2 * microbatches for o in ops)
    if microbatches >= ranks:
        assert sim.bubble_fraction == pytest.approx(schedules.ideal_bubble_fraction(ranks, microbatches))
    # 1F1B's point: rank r never holds more than ranks - r activations.
    for r, rank_ops in enumerate(ops):
        alive = peak = 0
        for op in rank_ops:
            alive += 1 if op.kind == "F" else -1
            peak = max(peak, alive)
        assert peak <= min(ranks - r, microbatches)


def test_1f1b_order_of_the_first_rank():
    got = [str(o) for o in schedules.one_f_one_b(4, 0, 6)]
    assert got == ["F0", "F1", "F2", "F3", "B0", "F4", "B1", "F5", "B2", "B3", "B4", "B5"]


@pytest.mark.parametrize("ranks,microbatches,chunks", [(2, 2, 2), (2, 4, 2), (2, 4, 3), (4, 4, 2), (4, 8, 2),
                                                       (4, 16, 4)])
def test_interleaved_beats_1f1b_by_the_chunk_count(ranks, microbatches, chunks):
    ops = schedules.schedule("interleaved", ranks, microbatches, chunks)
    sim = schedules.simulate(ops)
    assert all(len(o) == 2 * microbatches * chunks for o in ops)
    assert sim.bubble_fraction == pytest.approx(schedules.ideal_bubble_fraction(ranks, microbatches, chunks))
    flat = schedules.simulate(schedules.schedule("1f1b", ranks, microbatches))
    assert sim.bubble_fraction < flat.bubble_fraction
    # Every boundary that crosses ranks has a channel, each with a bounded number of messages in flight.
    assert all(1 <= n <= microbatches * chunks for n in sim.max_in_flight.values())


def test_bad_schedules_are_refused_with_a_reason():
    with pytest.raises(ValueError, match="multiple of the rank count"):
        schedules.interleaved(4, 0, 6, 2)
    with pytest.raises(ValueError, match="not one of"):
        schedules.schedule("gpipe", 2, 2)
    with pytest.raises(ValueError, match="deadlocks"):  # rank 1 wants B0 before it ran F0's backward input
        schedules.simulate([[Op("F", 0), Op("B", 0)], [Op("B", 0), Op("F", 0)]])
    with pytest.raises(ValueError, match="twice"):
        schedules.simulate([[Op("F", 0), Op("F", 0), Op("B", 0)]])
    with pytest.raises(ValueError, match="no rank runs"):
        schedules.simulate([[Op("F", 0)]])


def test_stages_must_divide_the_layers():
    assert schedules.partition_layers(8, 4) == [range(0, 2), range(2, 4), range(4, 6), range(6, 8)]
    with pytest.raises(ValueError, match="3 stages do not divide 8 layers"):
        schedules.partition_layers(8, 3)
    with pytest.raises(ValueError, match="do not divide"):
        schedules.partition_layers(2, 4)


def test_buckets_follow_backward_order_and_size():
    numels = [100, 10, 300, 50, 0, 20]
    got = buckets.plan_buckets(numels, 4, 4 * 120)
    assert [b.params for b in got] == [(5, 3), (2,), (1, 0)]
    assert [b.offsets for b in got] == [(0, 20), (0,), (0, 10)]
    assert [b.numel for b in got] == [70, 300, 110]
    # Every non-empty parameter exactly once; no bucket over the cap unless it is one parameter.
    seen = sorted(p for b in got for p in b.params)
    assert seen == [0, 1, 2, 3, 5]
    assert all(b.numel <= 120 or len(b.params) == 1 for b in got)
    assert len(buckets.plan_buckets(numels, 4, 1 << 30)) == 1
    with pytest.raises(ValueError, match="smaller than one element"):
        buckets.plan_buckets(numels, 4, 2)


def test_shards_cover_the_padded_buffer():
    assert buckets.padded(10, 4) == 12
    assert [buckets.shard_range(10, 4, i) for i in range(4)] == [(0, 3), (3, 6), (6, 9), (9, 12)]
    with pytest.raises(ValueError):
        buckets.shard_range(10, 4, 4)
