"""The drop-in promise, checked without PyTorch or a build: every call of
the seed tutorial (KuangjuX/NVSHMEM-Tutorial), of DeepEP v1.2.1's Buffer and
of pplx-kernels' AllToAll that we offer takes the reference's arguments, in
its order, with its defaults. Our sources are read with ast (no import), so
this runs in CI where torch is absent.

The tables below are the references' signatures as their sources declare
them (nvshmem_tutorial/__init__.py, buffer.py and csrc/pybind.cu of the seed;
deep_ep/buffer.py, deep_ep/utils.py and csrc/deep_ep.cpp's Config of
DeepEP; src/pplx_kernels/all_to_all.py of pplx-kernels). A parameter is
(name, default) or (name,) when required. Ours may add parameters after the
reference's, each with a default (or keyword-only), and may give a default
where the reference has none; nothing else.
"""
import ast
import os

import pytest

PKG = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "python",
                   "nvshmem_tutorial")

SEED_FUNCTIONS = {  # module-level, nvshmem_tutorial.<name>
    "get_unique_id": [],
    "init_with_unique_id": [("unique_id_vec",), ("rank",), ("world_size",), ("low_latency_mode",)],
    "nvshmem_alloc_tensor": [("size",), ("alignment",)],
    "nvshmem_free_tensor": [("tensor",)],
    "nvshmem_barrier": [],
    "nvshmem_get_tensor": [("local_tensor",), ("remote_tensor",), ("nbytes",), ("rank",)],
    "nvshmem_get_tensor_async": [("local_tensor",), ("remote_tensor",), ("nbytes",), ("rank",)],
    "nvshmem_put_tensor": [("remote_tensor",), ("local_tensor",), ("nbytes",), ("rank",)],
    "nvshmem_put_tensor_async": [("remote_tensor",), ("local_tensor",), ("nbytes",), ("rank",)],
    "tma_copy": [("input",), ("output",)],
}
GATHER = [("tensor_list",), ("tensor",), ("async_op", False)]
SEED_BUFFER = {
    "__init__": [("group",), ("rank",), ("num_ranks",), ("num_nvl_bytes",), ("num_rdma_bytes",),
                 ("low_latency_mode", False)],
    "get_num_device_sms": [],
    "barrier": [],
    "intranode_all_gather": GATHER,
    "internode_all_gather": GATHER,
    "send": [("tensor",), ("rank",)],
    "recv": [("tensor",), ("rank",)],
    "all_gather": GATHER,
    "all_gather_into_tensor": [("output_tensor",), ("tensor",), ("async_op", False)],
    "is_same_rdma_rank": [("rank",)],
    "intranode_barrier": [],
}
DEEPEP_BUFFER = {
    "__init__": [("group",), ("num_nvl_bytes", 0), ("num_rdma_bytes", 0), ("low_latency_mode", False),
                 ("num_qps_per_rank", 24), ("allow_nvlink_for_low_latency_mode", True), ("allow_mnnvl", False),
                 ("explicitly_destroy", False), ("comm", None)],
    "destroy": [],
    "is_sm90_compiled": [],
    "set_num_sms": [("new_num_sms",)],
    "capture": [],
    "get_low_latency_rdma_size_hint": [("num_max_dispatch_tokens_per_rank",), ("hidden",), ("num_ranks",),
                                       ("num_experts",)],
    "get_comm_stream": [],
    "get_local_buffer_tensor": [("dtype",), ("size", None), ("offset", 0), ("use_rdma_buffer", False)],
    "get_dispatch_config": [("num_ranks",)],
    "get_combine_config": [("num_ranks",)],
    "get_dispatch_layout": [("topk_idx",), ("num_experts",), ("previous_event", None), ("async_finish", False),
                            ("allocate_on_comm_stream", False)],
    "dispatch": [("x",), ("handle", None), ("num_tokens_per_rank", None), ("num_tokens_per_rdma_rank", None),
                 ("is_token_in_rank", None), ("num_tokens_per_expert", None), ("topk_idx", None),
                 ("topk_weights", None), ("expert_alignment", 1), ("num_worst_tokens", 0), ("config", None),
                 ("previous_event", None), ("async_finish", False), ("allocate_on_comm_stream", False)],
    "combine": [("x",), ("handle",), ("topk_weights", None), ("bias", None), ("config", None),
                ("previous_event", None), ("async_finish", False), ("allocate_on_comm_stream", False)],
    "clean_low_latency_buffer": [("num_max_dispatch_tokens_per_rank",), ("hidden",), ("num_experts",)],
    "low_latency_dispatch": [("x",), ("topk_idx",), ("num_max_dispatch_tokens_per_rank",), ("num_experts",),
                             ("cumulative_local_expert_recv_stats", None), ("dispatch_wait_recv_cost_stats", None),
                             ("use_fp8", True), ("round_scale", False), ("use_ue8m0", False),
                             ("async_finish", False), ("return_recv_hook", False)],
    "low_latency_combine": [("x",), ("topk_idx",), ("topk_weights",), ("handle",), ("use_logfmt", False),
                            ("zero_copy", False), ("async_finish", False), ("return_recv_hook", False),
                            ("out", None), ("combine_wait_recv_cost_stats", None)],
    "get_next_low_latency_combine_buffer": [("handle",)],
}
DEEPEP_STATIC = {"is_sm90_compiled", "set_num_sms", "capture", "get_low_latency_rdma_size_hint",
                 "get_dispatch_config", "get_combine_config"}
DEEPEP_CONFIG = {
    "__init__": [("num_sms", 20), ("num_max_nvl_chunked_send_tokens", 6), ("num_max_nvl_chunked_recv_tokens", 256),
                 ("num_max_rdma_chunked_send_tokens", 6), ("num_max_rdma_chunked_recv_tokens", 256)],
    "get_nvl_buffer_size_hint": [("hidden_bytes",), ("num_ranks",)],
    "get_rdma_buffer_size_hint": [("hidden_bytes",), ("num_ranks",)],
}
DEEPEP_EVENT = {
    "__init__": [("event", None), ("extra_tensors", None)],
    "current_stream_wait": [],
}
PPLX_FACTORY = [("max_num_tokens",), ("num_experts",), ("experts_per_token",), ("rank",), ("world_size",),
                ("dp_size",), ("hidden_dim",), ("hidden_dim_bytes",), ("hidden_dim_scale_bytes",)]
PPLX_ALL_TO_ALL = {
    "intranode": PPLX_FACTORY + [("group_name", "default")],
    "internode": PPLX_FACTORY,
    "dispatch": [("out_expert_num_tokens",), ("out_expert_x",), ("out_expert_x_scale",), ("dp_x",), ("dp_x_scale",),
                 ("indices",), ("bound_m",), ("do_send", True), ("do_recv", True)],
    "combine": [("out_tokens",), ("indices",), ("weights",), ("expert_y",), ("bound_m",), ("do_send", True),
                ("do_recv", True)],
    "destroy": [],
}
PPLX_CLASSMETHODS = {"intranode", "internode"}
PPLX_FUNCTIONS = {  # src/pplx_kernels/nvshmem.py
    "nvshmem_init": [("global_rank",), ("local_rank",), ("world_size",), ("device",), ("uid", None)],
}


def _tree(module):
    with open(os.path.join(PKG, module + ".py")) as f:
        return ast.parse(f.read())


def _functions(body):
    return {n.name: n for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def _class(module, name):
    for n in _tree(module).body:
        if isinstance(n, ast.ClassDef) and n.name == name:
            return _functions(n.body), n
    raise AssertionError(f"{module}.py has no class {name}")


def _decorators(fn):
    return {d.id for d in fn.decorator_list if isinstance(d, ast.Name)}


def _params(fn, drop_first):
    """[(name, default) or (name,)] of the positional parameters, and the
    keyword-only ones as {name: has_default}."""
    a = fn.args
    pos = a.posonlyargs + a.args
    defaults = [None] * (len(pos) - len(a.defaults)) + list(a.defaults)
    out = []
    for arg, d in zip(pos, defaults):
        out.append((arg.arg,) if d is None else (arg.arg, ast.literal_eval(d)))
    if drop_first:
        out = out[1:]
    kwonly = {arg.arg: d is not None for arg, d in zip(a.kwonlyargs, a.kw_defaults)}
    return out, kwonly


def _check(where, fn, ref, drop_first):
    ours, kwonly = _params(fn, drop_first)
    assert fn.args.vararg is None, f"{where}: *args would hide the reference's arguments"
    assert len(ours) >= len(ref), f"{where}: ours takes {ours}, the reference {ref}"
    for i, r in enumerate(ref):
        o = ours[i]
        assert o[0] == r[0], f"{where}: argument {i} is {o[0]!r}, the reference's is {r[0]!r}"
        if len(r) == 2:
            assert len(o) == 2 and o[1] == r[1] and type(o[1]) is type(r[1]), (
                f"{where}: {r[0]} defaults to {o[1:] or 'nothing'}, the reference's to {r[1]!r}")
    for extra in ours[len(ref):]:
        assert len(extra) == 2, f"{where}: our extra argument {extra[0]!r} must have a default"
    for name, has_default in kwonly.items():
        assert has_default, f"{where}: our keyword-only argument {name!r} must have a default"


def _module_functions(module):
    return _functions(_tree(module).body)


SEED_HOMES = {"get_unique_id": "bootstrap", "init_with_unique_id": "bootstrap"}


@pytest.mark.parametrize("name", sorted(SEED_FUNCTIONS))
def test_seed_function(name):
    module = SEED_HOMES.get(name, "tensors")
    fns = _module_functions(module)
    assert name in fns, f"{module}.py lacks the seed's {name}"
    _check(f"nvshmem_tutorial.{name}", fns[name], SEED_FUNCTIONS[name], drop_first=False)
    # ... and the package exports it at module level.
    with open(os.path.join(PKG, "__init__.py")) as f:
        init = f.read()
    assert f"    {name},\n" in init or f" {name}," in init or f" {name}  #" in init, f"__init__ does not export {name}"


@pytest.mark.parametrize("table,module,cls,static", [
    (SEED_BUFFER, "buffer", "NvshmemBuffer", set()),
    (DEEPEP_BUFFER, "ep", "Buffer", DEEPEP_STATIC),
    (DEEPEP_CONFIG, "ep", "Config", set()),
    (DEEPEP_EVENT, "ep", "EventOverlap", set()),
    (PPLX_ALL_TO_ALL, "pplx", "AllToAll", set()),
], ids=["seed NvshmemBuffer", "DeepEP Buffer", "DeepEP Config", "DeepEP EventOverlap", "pplx AllToAll"])
def test_class_methods(table, module, cls, static):
    methods, _ = _class(module, cls)
    for name, ref in table.items():
        assert name in methods, f"{module}.{cls} lacks {name}"
        fn = methods[name]
        decorators = _decorators(fn)
        if name in static:
            assert "staticmethod" in decorators, f"{cls}.{name} must be a staticmethod, as the reference's"
        if module == "pplx" and name in PPLX_CLASSMETHODS:
            assert "classmethod" in decorators, f"{cls}.{name} must be a classmethod, as pplx's"
        bound = "staticmethod" not in decorators
        _check(f"{module}.{cls}.{name}", fn, ref, drop_first=bound)


@pytest.mark.parametrize("name", sorted(PPLX_FUNCTIONS))
def test_pplx_function(name):
    fns = _module_functions("pplx")
    assert name in fns, f"pplx.py lacks pplx-kernels' {name}"
    _check(f"nvshmem_tutorial.pplx.{name}", fns[name], PPLX_FUNCTIONS[name], drop_first=False)


def test_deep_ep_shim_names():
    """What `import deep_ep` code reaches through a module that re-exports
    nvshmem_tutorial.ep: Buffer, Config, EventOverlap."""
    names = {n.name for n in _tree("ep").body if isinstance(n, ast.ClassDef)}
    assert {"Buffer", "Config", "EventOverlap"} <= names


def test_checker_rejects_a_changed_signature():
    """The comparison itself can fail: a renamed, reordered or re-defaulted
    argument is caught."""
    def fn_of(src):
        return ast.parse(src).body[0]
    ref = [("a",), ("b", 1)]
    _check("ok", fn_of("def f(a, b=1, c=None): pass"), ref, drop_first=False)
    for bad in ("def f(b, a=1): pass", "def f(a, b=2): pass", "def f(a): pass", "def f(a, b=1, *, c): pass",
                "def f(a, b=True): pass"):
        with pytest.raises(AssertionError):
            _check("bad", fn_of(bad), ref, drop_first=False)
