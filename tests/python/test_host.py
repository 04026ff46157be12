"""The torch-free Python package on host-memory PEs (what CI runs).

Each test runs its body as 3 PEs (launch), through the proxy and the fabric
transport, and checks results against numpy."""
import numpy as np
import nvshmem_tutorial as nt
import pytest


def _ring_put_signal(rank):
    n = nt.n_pes()
    assert nt.transport_to((rank + 1) % n).startswith("fabric:")
    free0 = nt._nvst.heap_free_bytes()
    buf = nt.alloc(4 * 100_003)
    assert nt._nvst.heap_free_bytes() <= free0 - 4 * 100_003
    sig = nt.alloc(8)
    rng = np.random.default_rng(rank)
    data = rng.standard_normal(100_003).astype(np.float32)
    nt.put_signal(buf, data, sig, 0, 1, (rank + 1) % n, add=True)
    nt.signal_wait_until(sig, 0, "ge", 1)
    got = buf.array(np.float32).copy()
    want = np.random.default_rng((rank - 1) % n).standard_normal(100_003).astype(np.float32)
    nt.barrier_all()
    nt.free(sig)
    nt.free(buf)
    assert nt._nvst.heap_free_bytes() == free0
    return bool(np.array_equal(got, want))


def test_put_signal_ring_is_exact():
    assert nt.launch(3, _ring_put_signal) == [True, True, True]


def _inputs(rank, n, size, dtype, salt):
    rng = np.random.default_rng(1000 * salt + rank)
    if dtype in (np.int32, np.int64):
        return rng.integers(-1000, 1000, size, dtype=dtype)
    return rng.uniform(-4, 4, size).astype(dtype)


def _collectives(rank):
    n = nt.n_pes()
    for salt, (dtype, op, size) in enumerate(
        [(np.float32, "sum", 1), (np.float32, "sum", 100_001), (np.int32, "max", 4097), (np.float16, "min", 999),
         (np.int32, "sum", 0), (np.float32, "prod", 1001), (np.int64, "prod", 777)]):
        ins = [_inputs(p, n, size, dtype, salt) for p in range(n)]
        out = np.full(size, 7, dtype=dtype)
        nt.all_reduce(ins[rank], out, op)
        want = ins[0].copy()
        for p in range(1, n):  # PE order, rounding after every step, as the library does
            ufunc = {"sum": np.add, "max": np.maximum, "min": np.minimum, "prod": np.multiply}[op]
            want = ufunc(want, ins[p]).astype(dtype)
        assert np.array_equal(out, want), (dtype, op, size)
    ins = [_inputs(p, n, 1234, np.float32, 99) for p in range(n)]
    out = np.zeros(1234 * n, dtype=np.float32)
    nt.all_gather(ins[rank], out)
    assert np.array_equal(out, np.concatenate(ins))
    ins = [_inputs(p, n, 1000 * n, np.int32, 98) for p in range(n)]
    out = np.zeros(1000, dtype=np.int32)
    nt.reduce_scatter(ins[rank], out, "sum")
    assert np.array_equal(out, sum(x[rank * 1000:(rank + 1) * 1000] for x in ins))
    buf = _inputs(rank, n, 5000, np.float32, 97)
    nt.broadcast(buf, 2)
    assert np.array_equal(buf, _inputs(2, n, 5000, np.float32, 97))
    return True


def test_collectives_match_numpy():
    assert nt.launch(3, _collectives) == [True, True, True]


def _teams(rank):
    """Teams from Python: the even PEs {0, 2} of 3, and split_2d's rows and
    columns; collectives on a team reduce over its members only."""
    even = nt.team_split_strided(nt.TEAM_WORLD, 0, 2, 2)
    x, y = nt.team_split_2d(nt.TEAM_WORLD, 2)
    for t in (even, x, y):
        nt.coll_prepare(t)
    assert nt.team_my_pe(even) == {0: 0, 1: -1, 2: 1}[rank]
    assert [nt.team_translate_pe(x, i) for i in range(nt.team_n_pes(x))] == ([0, 1] if rank < 2 else [2])
    assert [nt.team_translate_pe(y, i) for i in range(nt.team_n_pes(y))] == ([1] if rank == 1 else [0, 2])
    ins = [_inputs(p, 3, 10_001, np.float32, 50) for p in range(3)]
    out = np.zeros(10_001, np.float32)
    if rank == 1:
        with pytest.raises(RuntimeError, match="not a member of team"):
            nt.all_reduce(ins[rank], out, team=even)
    else:
        nt.all_reduce(ins[rank], out, team=even)
        assert np.array_equal(out, ins[0] + ins[2])
        gathered = np.zeros(2 * 10_001, np.float32)
        nt.all_gather(ins[rank], gathered, team=even)
        assert np.array_equal(gathered, np.concatenate([ins[0], ins[2]]))
    members = [nt.team_translate_pe(x, i) for i in range(nt.team_n_pes(x))]
    nt.all_reduce(ins[rank], out, "max", team=x)
    assert np.array_equal(out, np.maximum.reduce([ins[p] for p in members]))
    buf = ins[rank].copy()
    nt.broadcast(buf, nt.team_n_pes(y) - 1, team=y)
    assert np.array_equal(buf, ins[nt.team_translate_pe(y, nt.team_n_pes(y) - 1)])
    return True


def test_team_collectives_reduce_over_members_only():
    assert nt.launch(3, _teams) == [True, True, True]


def _bad_input(rank):
    n = nt.n_pes()
    a = np.zeros(10, dtype=np.float32)
    checks = [
        (lambda: nt.all_reduce(np.zeros((4, 4), np.float32)[:, 0], np.zeros(4, np.float32)), ValueError,
         "C-contiguous"),
        (lambda: nt.all_reduce(np.zeros(4, np.float64), np.zeros(4, np.float64)), TypeError, "float64"),
        (lambda: nt.all_reduce(a, np.zeros(11, np.float32)), ValueError, "11"),
        (lambda: nt.all_reduce(a, a.copy(), "avg"), ValueError, "avg"),
        (lambda: nt.all_gather(a, np.zeros(10, np.float32)), ValueError, "team size"),
        (lambda: nt.put(nt_buf, np.zeros(100, np.float32), (rank + 1) % n), ValueError, "exceed"),
        (lambda: nt.put(nt_buf, a, 7), RuntimeError, "PE 7 out of range"),
        (lambda: nt.signal_wait_until(nt_buf, 0, "bigger", 1), ValueError, "bigger"),
    ]
    nt_buf = nt.alloc(64)
    for fn, exc, text in checks:
        with pytest.raises(exc, match=text):
            fn()
    nt.barrier_all()
    nt.free(nt_buf)
    return True


def test_bad_input_raises_with_a_message():
    assert nt.launch(2, _bad_input) == [True, True]


def _view_outlives_finalize(rank):
    buf = nt.alloc(64)
    sig = nt.alloc(16)
    for dtype, exc, text in [(np.dtype("V0"), ValueError, "no size"), (object, TypeError, "Python objects"),
                             (np.dtype([("a", object)]), TypeError, "Python objects")]:
        with pytest.raises(exc, match=text):
            buf.array(dtype)
    for index in (2, 2**61, 2**63):
        with pytest.raises(ValueError, match="signal index"):
            nt.signal_wait_until(sig, index, "ge", 1)
        with pytest.raises(ValueError, match="signal index"):
            nt.put_signal(buf, np.zeros(1, np.uint8), sig, index, 1, rank)
    view = buf.array(np.uint8)
    view[:] = 40 + rank
    nt.barrier_all()
    return view  # read (pickled) after launch's finalize: the heap must still be there


def test_numpy_views_and_signal_indices_fail_cleanly():
    views = nt.launch(2, _view_outlives_finalize)
    assert [int(v[0]) for v in views] == [40, 41] and all(len(v) == 64 for v in views)


def _mismatched_alloc(rank):
    with pytest.raises(RuntimeError, match="disagree"):
        nt.alloc(64 if rank == 0 else 128)
    return True


def test_sizes_that_differ_across_ranks_raise_everywhere():
    assert nt.launch(2, _mismatched_alloc) == [True, True]


def _device_layer_on_host_pes(rank):
    """What the PyTorch layer stands on, where it can run without a GPU:
    the bootstrap allgather (training plans agree through it), and
    clear refusals of the GPU-only entry points on host-memory PEs."""
    mine = bytes([rank]) * 5
    everyone = nt._nvst.bootstrap_allgather(mine)
    assert everyone == [bytes([p]) * 5 for p in range(nt.n_pes())], everyone
    errors = []
    for call in (lambda: nt._nvst.dlpack_bytes(1 << 20, 16, None),          # no GPU: no tensors
                 lambda: nt._nvst.coll.all_reduce(0, 0, 1, 9, nt._nvst.coll.OPS["sum"], 0),  # no such dtype
                 lambda: nt._nvst.coll.all_reduce(0, 0, 1, nt._nvst.coll.DTYPES["float32"], 7, 0),  # no such op
                 lambda: nt._nvst.signal_wait_until_on_stream(0, "ge", 1, 0)):    # GPU heaps only
        try:
            call()
            errors.append("no error")
        except (ValueError, TypeError, RuntimeError) as e:
            errors.append(type(e).__name__ + ": " + str(e))
    return errors


def test_device_layer_refuses_clearly_without_a_gpu():
    for errors in nt.launch(2, _device_layer_on_host_pes):
        assert errors[0].startswith("ValueError") and "GPU" in errors[0], errors[0]
        assert errors[1].startswith("ValueError") and "dtype code 9" in errors[1], errors[1]
        assert errors[2].startswith("ValueError") and "reduction code 7" in errors[2], errors[2]
        assert errors[3].startswith("NvstError") and "GPU heap" in errors[3], errors[3]  # a RuntimeError


def test_unique_id_for_a_job_across_hosts():
    uid = nt.make_unique_id("10.1.2.3")
    kind, host, port, cookie = uid.split(":")
    assert (kind, host) == ("nvst1", "10.1.2.3") and 0 < int(port) < 65536 and len(cookie) == 32
    assert nt.make_unique_id().split(":")[1] == "127.0.0.1"
    assert bytes(nt.get_unique_id()).decode().split(":")[1] == "127.0.0.1"  # the seed form
    with pytest.raises(RuntimeError, match="host"):
        nt.make_unique_id("bad:host")


def test_backend_choice_is_checked():
    # Refused before anything starts: an unknown backend, and NVSHMEM where
    # this build has none.
    with pytest.raises(ValueError, match="'bogus' is not one of 'nvst', 'nvshmem'"):
        nt.init(backend="bogus")
    assert isinstance(nt.nvshmem_backend_built(), bool)
    if not nt.nvshmem_backend_built():
        assert nt.nvshmem_backend_version() == ""
        with pytest.raises(ValueError, match="not in this build"):
            nt.init(backend="nvshmem")
        return
    assert nt.nvshmem_backend_version().count(".") == 2
    # Built with NVSHMEM: on a host without a GPU it says so (in a child:
    # init_with_unique_id sets NVST_* in the environment of its process).
    import subprocess
    import sys
    code = ("import nvshmem_tutorial as nt\n"
            "try:\n"
            "    nt.init_with_unique_id(nt.make_unique_id(), 0, 1, backend='nvshmem')\n"
            "except nt.NvstError as e:\n"
            "    print('REFUSED', e)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={**__import__("os").environ, "CUDA_VISIBLE_DEVICES": ""})
    assert "REFUSED" in r.stdout and "needs a GPU" in r.stdout, (r.stdout, r.stderr)


def test_seed_bootstrap_forms_start_a_job():
    """The seed's get_unique_id() (a list of byte values) and
    init_with_unique_id(unique_id_vec, rank, world_size, low_latency_mode)
    start a 2-PE job on host heaps; bad IDs and ranks are refused by name."""
    import subprocess
    import sys
    uid = nt.get_unique_id()
    assert isinstance(uid, list) and all(isinstance(b, int) and 0 <= b < 256 for b in uid)
    code = ("import sys, nvshmem_tutorial as nt\n"
            "uid = [int(b) for b in sys.argv[2].split(',')]\n"
            "pe = nt.init_with_unique_id(uid, int(sys.argv[1]), 2, False)\n"
            "nt.barrier_all()\n"
            "print('PE', pe, 'OF', nt.n_pes())\n"
            "nt.finalize()\n")
    env = {**__import__("os").environ, "NVST_HEAP": "host"}
    procs = [subprocess.Popen([sys.executable, "-c", code, str(r), ",".join(map(str, uid))], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    for r, (p, (out, err)) in enumerate(zip(procs, outs)):
        assert p.returncode == 0 and f"PE {r} OF 2" in out, (out, err[-2000:])
    with pytest.raises(TypeError, match="unique_id_vec"):
        nt.init_with_unique_id(3.5, 0, 1, False)
    with pytest.raises(ValueError, match="NVSHMEM's own"):
        nt.init_with_unique_id([0xff, 0xfe], 0, 1, False)
    with pytest.raises(ValueError, match=r"rank 2 is not in \[0, 2\)"):
        nt.init_with_unique_id(uid, 2, 2, False)
    with pytest.raises(TypeError, match="low_latency_mode"):
        nt.init_with_unique_id(uid, 0, 1, "no")


def test_package_holds_every_module_of_the_source_tree():
    """The package imported (the build tree's, or an installed one) has every
    .py of python/nvshmem_tutorial: a module missing there runs from a wheel
    but fails at import from the build."""
    import pathlib

    source = pathlib.Path(__file__).resolve().parents[2] / "python" / "nvshmem_tutorial"
    built = pathlib.Path(nt.__file__).resolve().parent
    want = {p.relative_to(source) for p in source.rglob("*.py")}
    have = {p.relative_to(built) for p in built.rglob("*.py")}
    assert want, f"no modules found under {source}"
    assert not want - have, f"missing from {built}: {sorted(map(str, want - have))}"
