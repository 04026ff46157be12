"""The training patterns against plain single-process references.

Each check runs on every rank of a job that is already up (host heaps from
test_training_host.py's launch, GPUs from training_job.py under torchrun),
builds the pattern and a reference from the same seeds, trains 20 steps in
fp32, and raises AssertionError naming what differs. The reference is
computed on every rank: each rank's gradients one after the other, summed
in rank order (the library's own order), so where the pattern's reduction
order is fixed the parameters must be equal bit for bit.
"""
import copy

import nvshmem_tutorial as nt
import torch
from nvshmem_tutorial.training import (
    AsyncGradientServer,
    ColumnParallelLinear,
    Communicator,
    GradientSync,
    LockFreeAccumulator,
    PipelineEngine,
    RowParallelLinear,
    ShardedOptimizer,
)

STEPS = 20
WIDTH = 16


def make_model(kind):
    torch.manual_seed(1234)
    if kind == "mlp":
        return torch.nn.Sequential(torch.nn.Linear(WIDTH, 32), torch.nn.Tanh(), torch.nn.Linear(32, 32),
                                   torch.nn.Tanh(),
                                   torch.nn.Linear(32, 32), torch.nn.Tanh(), torch.nn.Linear(32, WIDTH))
    if kind == "transformer":
        return torch.nn.TransformerEncoderLayer(d_model=WIDTH, nhead=2, dim_feedforward=32, dropout=0.0,
                                                batch_first=True)
    raise ValueError(kind)


def batch(kind, step, rank, device):
    g = torch.Generator().manual_seed(10_000 * step + rank)
    shape = (8, WIDTH) if kind == "mlp" else (2, 5, WIDTH)
    return torch.randn(shape, generator=g).to(device), torch.randn(shape, generator=g).to(device)


def loss_of(model, x, y):
    return torch.nn.functional.mse_loss(model(x), y)


def compare(got, want, what, exact):
    """Parameters within 1e-5 relative (max error over max magnitude), or equal."""
    for i, (a, b) in enumerate(zip(got, want)):
        a, b = a.detach().cpu(), b.detach().cpu()
        if exact:
            if not torch.equal(a, b):
                raise AssertionError(f"{what}: parameter #{i} differs (max {float((a - b).abs().max()):.3g}); "
                                     "expected bit-exact")
        else:
            rel = float((a - b).abs().max()) / max(float(b.abs().max()), 1e-30)
            if rel > 1e-5:
                raise AssertionError(f"{what}: parameter #{i} off by {rel:.3g} relative")


def reference_average(ref, kind, step, world, device):
    """Sets ref's grads to the average of every rank's gradient (rank order)."""
    total = None
    for r in range(world):
        ref.zero_grad()
        loss_of(ref, *batch(kind, step, r, device)).backward()
        g = [p.grad.clone() for p in ref.parameters()]
        total = g if total is None else [a + b for a, b in zip(total, g)]
    for p, g in zip(ref.parameters(), total):
        p.grad = g / world


def check_gradient_sync(kind, hierarchical=False):
    comm = Communicator()
    dev, world = comm.device, comm.world
    model = make_model(kind).to(dev)
    ref = copy.deepcopy(model)
    sync = GradientSync(model.parameters(), comm, bucket_bytes=2048, hierarchical=hierarchical)
    assert len(sync.buckets) > 1, "the test wants several buckets"
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05)
    for step in range(STEPS):
        opt.zero_grad()
        loss_of(model, *batch(kind, step, comm.rank, dev)).backward()
        sync.synchronize_gradients()
        opt.step()
        reference_average(ref, kind, step, world, dev)
        ref_opt.step()
    # Flat: PE order, as the reference. Hierarchical: node sums added in node order.
    sync.close()  # collective: before any check that may raise on one rank only
    compare(model.parameters(), ref.parameters(), f"GradientSync {kind} hierarchical={hierarchical}",
            exact=not hierarchical)


def check_sharded_optimizer(kind):
    comm = Communicator()
    dev, world = comm.device, comm.world
    model = make_model(kind).to(dev)
    ref = copy.deepcopy(model)
    # Adam on the MLP, SGD with momentum on the transformer: the attention's
    # key bias has a true gradient of zero, so its gradient is rounding
    # noise, which Adam scales up to full-size steps; any last-bit
    # difference in the update (see below) then grows without bound there.
    if kind == "mlp":
        zero = ShardedOptimizer(model.parameters(), comm, optimizer="adam", lr=1e-2)
        ref_opt = torch.optim.Adam(ref.parameters(), lr=1e-2, fused=True)
    else:
        zero = ShardedOptimizer(model.parameters(), comm, optimizer="sgd", lr=1e-2, momentum=0.9)
        ref_opt = torch.optim.SGD(ref.parameters(), lr=1e-2, momentum=0.9, fused=True)
    mine, full = zero.state_bytes()
    assert mine * world >= full and mine <= full // world + 8 * world, (mine, full)
    for step in range(STEPS):
        zero.zero_grad()
        loss_of(model, *batch(kind, step, comm.rank, dev)).backward()
        zero.step()
        reference_average(ref, kind, step, world, dev)
        ref_opt.step()
    zero.close()
    # The sums are in PE order, as the reference's, but the update is not
    # bit-exact: a fused optimizer kernel may treat a shard's last elements
    # (its vector tail) differently from the same elements inside the whole
    # tensor, so the shard boundaries can move a last bit.
    compare(model.parameters(), ref.parameters(), f"ShardedOptimizer {kind}", exact=False)


def check_async(staleness):
    """Staleness 0 is the synchronous reference; staleness k applies, at
    step t, the average computed at step t - k (a sequential simulation)."""
    kind = "mlp"
    comm = Communicator()
    dev, world = comm.device, comm.world
    model = make_model(kind).to(dev)
    ref = copy.deepcopy(model)
    server = AsyncGradientServer(model.parameters(), comm, staleness=staleness)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05)
    queue = []
    for step in range(STEPS):
        opt.zero_grad()
        loss_of(model, *batch(kind, step, comm.rank, dev)).backward()
        server.submit_gradients()
        if server.wait():
            opt.step()
        reference_average(ref, kind, step, world, dev)
        queue.append([p.grad.clone() for p in ref.parameters()])
        if len(queue) > staleness:
            for p, g in zip(ref.parameters(), queue.pop(0)):
                p.grad = g
            ref_opt.step()
    server.close()
    compare(model.parameters(), ref.parameters(), f"AsyncGradientServer staleness {staleness}", exact=True)


def check_lock_free(deterministic):
    comm = Communicator()
    dev, world = comm.device, comm.world
    acc = LockFreeAccumulator(1000, comm, deterministic=deterministic)
    got_all, want_all = [], []
    for gen in range(5):
        parts = [torch.randn(1000, generator=torch.Generator().manual_seed(77 * gen + r)).to(dev)
                 for r in range(world)]
        acc.accumulate(parts[comm.rank])
        got = acc.result()
        want = parts[0].clone()
        for p in parts[1:]:
            want += p
        got_all.append(got)
        want_all.append(want)
    acc.close()
    compare(got_all, want_all, f"LockFreeAccumulator deterministic={deterministic} (by generation)",
            exact=deterministic)


def check_pipeline(schedule_kind, chunks):
    comm = Communicator()
    dev, world = comm.device, comm.world
    torch.manual_seed(99)
    layers = [torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.Tanh()) for _ in range(8)]
    ref = copy.deepcopy(torch.nn.Sequential(*layers)).to(dev)
    mine = [c.to(dev) for c in PipelineEngine.split(layers, chunks, comm)]
    micro = 2 * world
    engine = PipelineEngine(mine, micro, (4, WIDTH), torch.nn.functional.mse_loss, schedule_kind, comm=comm)
    params = [p for c in mine for p in c.parameters()]
    opt = torch.optim.SGD(params, lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    per = 8 // (world * chunks)
    wrong_loss = None
    for step in range(STEPS):
        g = torch.Generator().manual_seed(step)
        xs = [torch.randn(4, WIDTH, generator=g).to(dev) for _ in range(micro)]
        ys = [torch.randn(4, WIDTH, generator=g).to(dev) for _ in range(micro)]
        opt.zero_grad()
        losses, stats = engine.step(xs, ys)
        opt.step()
        assert 0.0 <= stats.bubble_fraction <= 1.0 and stats.step_seconds > 0, stats
        ref_opt.zero_grad()
        want = []
        for x, y in zip(xs, ys):
            loss = torch.nn.functional.mse_loss(ref(x), y) / micro
            loss.backward()
            want.append(float(loss))
        ref_opt.step()
        if comm.rank == world - 1 and losses != want and wrong_loss is None:
            wrong_loss = f"step {step}: losses {losses}, the sequential model's {want}"
    ref_params = []
    for c in range(chunks):
        stage = c * world + comm.rank
        for i in range(stage * per, (stage + 1) * per):
            ref_params += list(ref[i].parameters())
    engine.close()
    assert wrong_loss is None, wrong_loss
    compare(params, ref_params, f"PipelineEngine {schedule_kind} chunks={chunks}", exact=True)


def check_tensor_parallel():
    comm = Communicator()
    dev = comm.device
    torch.manual_seed(5)
    fc1, fc2 = torch.nn.Linear(WIDTH, 32 * comm.world), torch.nn.Linear(32 * comm.world, WIDTH)
    ref = torch.nn.Sequential(fc1, torch.nn.Tanh(), fc2).to(dev)
    tp = torch.nn.Sequential(ColumnParallelLinear.from_linear(copy.deepcopy(fc1).to(dev), gather_output=False,
                                                              comm=comm),
                             torch.nn.Tanh(),
                             RowParallelLinear.from_linear(copy.deepcopy(fc2).to(dev), comm=comm))
    first = copy.deepcopy(fc1).to(dev)
    gathered = ColumnParallelLinear.from_linear(first, gather_output=True, comm=comm)
    opt = torch.optim.SGD(tp.parameters(), lr=0.05)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05)
    grads = []
    for step in range(STEPS):
        x, y = batch("mlp", step, 0, dev)  # the same input on every rank
        xg = x.clone().requires_grad_(True)
        xr = x.clone().requires_grad_(True)
        opt.zero_grad()
        ref_opt.zero_grad()
        loss_of(tp, xg, y).backward()
        loss_of(ref, xr, y).backward()
        grads.append((xg.grad, xr.grad))
        opt.step()
        ref_opt.step()
    out = gathered(x)
    compare([g for g, _ in grads], [r for _, r in grads], "tensor parallel input gradients (by step)", exact=False)
    compare([out], [first(x)], "ColumnParallelLinear gather_output", exact=False)
    n1, n2 = tp[0].out_per_rank, tp[2].in_per_rank
    r = comm.rank
    compare([tp[0].weight, tp[0].bias, tp[2].weight, tp[2].bias],
            [ref[0].weight[r * n1:(r + 1) * n1], ref[0].bias[r * n1:(r + 1) * n1],
             ref[2].weight[:, r * n2:(r + 1) * n2], ref[2].bias], "tensor parallel MLP", exact=False)


def expect_error(fn, *needles):
    try:
        fn()
    except ValueError as e:
        for n in needles:
            if n not in str(e):
                raise AssertionError(f"the message {str(e)!r} does not say {n!r}")
        return str(e)
    raise AssertionError(f"no ValueError (wanted one saying {needles})")


def check_bad_input():
    """Each error is raised on every rank (the launcher or the job requires
    every rank to pass), with a message naming what was wrong."""
    comm = Communicator()
    dev = comm.device
    torch.manual_seed(comm.rank)  # different parameters on every rank
    model = torch.nn.Linear(4, 4).to(dev)
    if comm.world > 1:
        expect_error(lambda: GradientSync(model.parameters(), comm), "parameter values differ", "parameter #")
    layers = [torch.nn.Linear(4, 4) for _ in range(6)]
    expect_error(lambda: PipelineEngine.split(layers, 4, comm), "do not divide 6 layers")
    shapes = [torch.nn.Parameter(torch.zeros(4 + comm.rank, device=dev))]
    if comm.world > 1:
        expect_error(lambda: GradientSync(shapes, comm), "parameter shapes")
    free = nt._nvst.heap_free_bytes()
    big = torch.nn.Parameter(torch.zeros(free // 4 + 1024, device=dev))
    expect_error(lambda: GradientSync([big], comm, bucket_bytes=1 << 40, check_parameters=False),
                 "symmetric heap", "NVST_SYMMETRIC_SIZE")
