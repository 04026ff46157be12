"""Training patterns on symmetric memory (docs/training-patterns.md).

Without PyTorch only the schedule and bucketing arithmetic is here
(schedules, buckets); with it:
 - GradientSync: bucketed data-parallel gradient averaging from backward hooks
 - HierarchicalAllReduce: inside the node, across nodes, back inside
 - HybridParameterServer: parameters mirrored in a ParameterCache for any rank
 - PipelineEngine: 1F1B and interleaved schedules, put_signal handoff
 - AsyncGradientServer, LockFreeAccumulator: stale-by-k averaging, lock-free sums
 - ShardedOptimizer: ZeRO-style reduce-scatter, fused shard update, all-gather
 - ColumnParallelLinear, RowParallelLinear: tensor parallelism
 - Communicator: the runtime's collectives on a team, for all of the above
"""
from . import buckets, schedules  # noqa: F401

try:
    import torch as _torch  # noqa: F401
except ImportError:  # pragma: no cover - depends on the machine
    _torch = None
if _torch is not None:
    from .async_grad import AsyncGradientServer, LockFreeAccumulator  # noqa: F401
    from .comm import Communicator  # noqa: F401
    from .gradient_sync import GradientSync  # noqa: F401
    from .hierarchical import HierarchicalAllReduce  # noqa: F401
    from .parameter_server import HybridParameterServer  # noqa: F401
    from .pipeline import PipelineEngine, StepStats  # noqa: F401
    from .tensor_parallel import ColumnParallelLinear, RowParallelLinear  # noqa: F401
    from .zero import ShardedOptimizer  # noqa: F401
