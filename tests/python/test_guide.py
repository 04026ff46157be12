"""The decision guide without a GPU: --analyze on measurements (crossovers
computed from known rows, the newest multi-GPU file chosen, baselines
written by scripts/baseline.py read) and --pitfalls (each checked mistake
made on host-memory PEs gives its error)."""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

from nvshmem_tutorial.guide.analyze import best_by_size, ranges, tree
from nvshmem_tutorial.guide.results import document, newest_multi_gpu, write_results


def _row(op, impl, size, t, wrong=0):
    return {"op": op, "impl": impl, "bytes": size, "time_us": t, "algbw_gbps": 0.0, "busbw_gbps": 0.0,
            "wrong": wrong}


def test_crossovers_follow_the_fastest_implementation():
    rows = [_row("all_reduce", "nvst", 1024, 5.0), _row("all_reduce", "nccl", 1024, 10.0),
            _row("all_reduce", "nvst", 4096, 6.0), _row("all_reduce", "nccl", 4096, 9.0),
            _row("all_reduce", "nvst", 1 << 20, 30.0), _row("all_reduce", "nccl", 1 << 20, 20.0),
            _row("all_reduce", "torch_symm", 1 << 20, 25.0),
            _row("all_reduce", "nvst", 1 << 22, 3.0, wrong=5), _row("all_reduce", "nccl", 1 << 22, 50.0)]
    per = best_by_size(rows)["all_reduce"]
    assert per[1 << 22] == {"NCCL": 50.0}  # a wrong row never wins
    rs = ranges(per)
    assert [(a, b, w) for a, b, w, _ in rs] == [(1024, 4096, "ours"), (1 << 20, 1 << 20, "NCCL")]
    assert abs(rs[0][3] - 2.0) < 1e-9 and abs(rs[1][3] - 1.25) < 1e-9
    lines = tree({"rows": rows})
    assert "  crossover between 4 KB and 1 MB: ours -> NCCL" in lines
    assert "  => ours up to 4 KB; NCCL above" in lines
    assert "p2p: not measured here" in lines


def test_eager_rows_are_preferred_to_graph_rows():
    rows = [_row("all_gather_eager", "nvst", 1024, 9.0), _row("all_gather_eager", "nccl", 1024, 8.0),
            _row("all_gather_graph", "nvst", 1024, 1.0), _row("all_gather_graph", "nccl", 1024, 2.0)]
    assert best_by_size(rows)["all_gather"][1024] == {"ours": 9.0, "NCCL": 8.0}


def test_analyze_picks_the_newest_measurement_of_several_gpus(tmp_path):
    def doc(date, gpus, t_ours):
        d = document([_row("put", "nvst_put", 4096, t_ours), _row("put", "nccl", 4096, 10.0)], gpus, {}, "")
        d["date"] = date
        return d

    write_results(str(tmp_path / "old.json"), doc("2026-01-01T00:00:00Z", ["H200", "H200"], 5.0))
    write_results(str(tmp_path / "new.json"), doc("2026-02-01T00:00:00Z", ["H200", "H200"], 20.0))
    write_results(str(tmp_path / "one_gpu.json"), doc("2026-03-01T00:00:00Z", ["H200"], 1.0))
    path, d = newest_multi_gpu(str(tmp_path))
    assert path.endswith("new.json")
    keys = set(json.load(open(path)))
    assert {"machine", "gpus", "date", "commit", "versions", "label", "rows"} <= keys
    env = {**os.environ}
    out = subprocess.run([sys.executable, "-m", "nvshmem_tutorial.guide", "--analyze", "--from", str(tmp_path)],
                         capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    assert "2026-02-01" in out.stdout and "new.json" in out.stdout
    assert "=> use NCCL at every measured size" in out.stdout
    empty = tmp_path / "empty"
    empty.mkdir()
    out = subprocess.run([sys.executable, "-m", "nvshmem_tutorial.guide", "--analyze", "--from", str(empty)],
                         capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 1 and "no measurement of two GPUs" in out.stderr


ROOT = Path(__file__).resolve().parents[2]


def _baseline_writer():
    """scripts/baseline.py, the one writer of bench/baselines/ files."""
    spec = importlib.util.spec_from_file_location("baseline", ROOT / "scripts" / "baseline.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _analyze(where):
    return subprocess.run([sys.executable, "-m", "nvshmem_tutorial.guide", "--analyze", "--from", str(where)],
                          capture_output=True, text=True, timeout=60)


def test_guide_results_become_a_baseline_section_that_analyze_reads(tmp_path):
    baseline = _baseline_writer()
    guide = document([_row("all_reduce", "nvst", 1024, 5.0), _row("all_reduce", "nccl", 1024, 10.0)],
                     ["H200", "H200"], {"torch": "2.11"}, "guide")
    guide["date"] = "2026-03-01T00:00:00Z"
    write_results(str(tmp_path / "guide.json"), guide)
    # The guide's JSON goes into a baseline through the baselines' own writer.
    base = tmp_path / "bases"
    base.mkdir()
    baseline.add(str(base / "h200-x2.json"), "guide", str(tmp_path / "guide.json"),
                 "torchrun --nproc_per_node=2 -m nvshmem_tutorial.guide --benchmark", {}, {})
    coll = document([_row("all_reduce_eager", "nvst", 1024, 50.0), _row("all_reduce_eager", "nccl", 1024, 1.0)],
                    ["H200", "H200"], {}, "coll")
    coll["date"] = "2026-03-02T00:00:00Z"
    write_results(str(tmp_path / "coll.json"), coll)
    baseline.add(str(base / "h200-x2.json"), "coll", str(tmp_path / "coll.json"), "nvst bench coll", {}, {})
    path, d = newest_multi_gpu(str(base))
    assert path.endswith("h200-x2.json") and d["sections"] == ["guide"]  # the guide's own section first
    out = _analyze(base)
    assert out.returncode == 0, out.stderr
    assert "sections guide" in out.stdout and "2026-03-01" in out.stdout
    assert "=> use ours at every measured size" in out.stdout


def test_a_baseline_without_guide_section_uses_its_default_setting_sections(tmp_path):
    baseline = _baseline_writer()
    coll = document([_row("all_reduce_eager", "nvst", 1024, 5.0), _row("all_reduce_eager", "nccl", 1024, 9.0)],
                    ["H100", "H100"], {}, "coll")
    coll["date"] = "2026-04-01T00:00:00Z"
    nodes = document([_row("put", "nvst_proxy", 4096, 1.0), _row("put", "nccl_net", 4096, 2.0)],
                     ["H100", "H100"], {}, "across logical nodes")
    nodes["date"] = "2026-04-02T00:00:00Z"
    for name, doc in (("coll", coll), ("nodes", nodes)):
        write_results(str(tmp_path / f"{name}.json"), doc)
    target = str(tmp_path / "h100-x2.json")
    baseline.add(target, "coll", str(tmp_path / "coll.json"), "nvst bench coll", {}, {})
    baseline.add(target, "p2p_nodes_shm", str(tmp_path / "nodes.json"), "nvst bench p2p",
                 {"NVST_NODE_SIZE": "1"}, {})
    path, d = newest_multi_gpu(target)
    assert d["sections"] == ["coll"] and d["date"] == "2026-04-01T00:00:00Z"
    lines = tree(d)
    assert "p2p: not measured here" in lines  # the logical-node run answers another question
    assert "  => use ours at every measured size" in lines
    one_gpu = tmp_path / "h100-x1.json"
    baseline.add(str(one_gpu), "coll", str(tmp_path / "coll.json"), "nvst bench coll", {}, {})
    with open(one_gpu) as f:
        doc = json.load(f)
    doc["sections"]["coll"]["gpus"] = ["H100"]
    with open(one_gpu, "w") as f:
        json.dump(doc, f)
    assert newest_multi_gpu(str(one_gpu)) is None


def test_analyze_reads_the_committed_baselines():
    found = newest_multi_gpu(str(ROOT / "bench" / "baselines"))
    assert found is not None, "no baseline of two GPUs or more is committed"
    path, d = found
    assert len(d["gpus"]) >= 2 and d["sections"]
    out = _analyze(ROOT / "bench" / "baselines")
    assert out.returncode == 0, out.stderr
    assert f"Measured on {d['machine']}, {d['date']}" in out.stdout and os.path.basename(path) in out.stdout
    assert "all_reduce:" in out.stdout


def test_pitfalls_each_checked_mistake_gives_its_error():
    out = subprocess.run([sys.executable, "-m", "nvshmem_tutorial.guide", "--pitfalls"], capture_output=True,
                         text=True, timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    assert "NO ERROR" not in text
    for expected in ("symmetric heap", "timed out", "full on PE", "shape", "out of range"):
        assert expected in text, (expected, text)
