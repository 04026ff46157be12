"""scripts/baseline.py (the writer of bench/baselines/) and the committed
baselines: every file follows the one schema, a section added replaces its
namesake and keeps the others, the torch bench's tables become common rows,
and bad input is refused with a message."""
import glob
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import baseline  # noqa: E402

ROW_KEYS = {"op", "impl", "bytes", "time_us", "algbw_gbps", "busbw_gbps", "wrong"}


def nvst_result(date, rows):
    return {"machine": "host (2x NVIDIA H200)", "gpus": ["NVIDIA H200"] * 2, "date": date, "commit": "abc123",
            "versions": {"cuda_runtime": "13.0", "nccl": "2.28.3", "nvshmem": None}, "label": "",
            "rows": rows}


def row(op, impl, nbytes, us):
    return {"op": op, "impl": impl, "bytes": nbytes, "time_us": us, "algbw_gbps": nbytes / us / 1e3,
            "busbw_gbps": nbytes / us / 1e3, "wrong": 0}


def write(tmp_path, name, doc):
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return str(path)


def test_add_replaces_its_section_and_keeps_the_others(tmp_path):
    out = str(tmp_path / "h200-x2.json")
    a = write(tmp_path, "a.json", nvst_result("2026-01-01T00:00:00Z", [row("put", "nvst_put", 4096, 5.0)]))
    b = write(tmp_path, "b.json", nvst_result("2026-01-02T00:00:00Z", [row("fifo_nop", "1_warp", 100, 1.0)]))
    c = write(tmp_path, "c.json", nvst_result("2026-01-03T00:00:00Z", [row("put", "nvst_put", 4096, 4.0)]))
    baseline.add(out, "p2p", a, "nvst bench p2p", {}, {"driver": "570"})
    baseline.add(out, "fifo", b, "nvst bench fifo", {"NVST_NODE_SIZE": "1"}, {"driver": "580"})
    baseline.add(out, "p2p", c, "nvst bench p2p", {}, {})
    doc = json.load(open(out))
    assert doc["schema"] == baseline.SCHEMA
    assert sorted(doc["sections"]) == ["fifo", "p2p"]
    assert doc["sections"]["p2p"]["rows"][0]["time_us"] == 4.0
    assert doc["sections"]["fifo"]["env"] == {"NVST_NODE_SIZE": "1"}
    assert doc["date"] == "2026-01-03T00:00:00Z"           # the newest section's
    assert doc["versions"]["driver"] == "580"              # from fifo: p2p's own went with it
    assert "nvshmem" not in doc["versions"]                # nothing measured is not a version


def test_torch_bench_tables_become_common_rows(tmp_path):
    torch_doc = {"date": "2026-01-01", "gpu": "NVIDIA H200", "world": 2, "torch": "2.11", "shared_gpu": False,
                 "nvshmem4py": False,
                 "rows": [{"table": "p2p", "bytes": 1024, "us": {"nccl": 10.0, "ours": 2.0},
                           "gbps": {"nccl": 0.1024, "ours": 0.512}, "wrong": 0},
                          {"table": "allgather", "bytes": 1024, "us": {"ours": 4.0}, "busbw": {"ours": 0.256},
                           "wrong": 3}]}
    out = str(tmp_path / "x.json")
    baseline.add(out, "torch", write(tmp_path, "t.json", torch_doc), "torchrun ...", {}, {}, "abc")
    sec = json.load(open(out))["sections"]["torch"]
    assert sec["commit"] == "abc" and sec["versions"]["torch"] == "2.11"
    by = {(r["op"], r["impl"]): r for r in sec["rows"]}
    assert set(by) == {("torch_p2p", "nccl"), ("torch_p2p", "ours"), ("torch_all_gather", "ours")}
    assert all(ROW_KEYS <= r.keys() for r in sec["rows"])
    assert by[("torch_all_gather", "ours")]["algbw_gbps"] == pytest.approx(2 * 1024 / 4.0 / 1e3)
    assert by[("torch_all_gather", "ours")]["wrong"] == 3


@pytest.mark.parametrize("bad,message", [
    ({"rows": [{"op": "put"}]}, "lacks"),
    ({"no": "rows"}, "not a benchmark result"),
])
def test_bad_results_are_refused_with_a_message(tmp_path, bad, message):
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "baseline.py"), "add",
                        str(tmp_path / "b.json"), "p2p", write(tmp_path, "bad.json", bad), "--command", "x"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and message in r.stderr
    assert not os.path.exists(tmp_path / "b.json")


def test_section_names_are_checked(tmp_path):
    a = write(tmp_path, "a.json", nvst_result("2026-01-01", [row("put", "nvst_put", 4096, 5.0)]))
    with pytest.raises(ValueError, match="section name"):
        baseline.add(str(tmp_path / "b.json"), "P2P nodes", a, "x", {}, {})


def test_gpu_names_become_shapes():
    assert baseline.gpu_slug("NVIDIA H200") == "h200"
    assert baseline.gpu_slug("NVIDIA H100 80GB HBM3") == "h100"
    with pytest.raises(ValueError):
        baseline.gpu_slug("NVIDIA")


def test_committed_baselines_follow_the_schema():
    files = glob.glob(os.path.join(ROOT, "bench", "baselines", "*.json"))
    assert files, "bench/baselines/ has no baseline"
    for path in files:
        doc = json.load(open(path))
        name = os.path.basename(path)
        assert doc["schema"] == baseline.SCHEMA, name
        assert {"machine", "gpus", "date", "commit", "versions", "sections"} <= doc.keys(), name
        assert name[:-5].split("-x")[0] == baseline.gpu_slug(doc["gpus"][0]), name
        assert name.endswith(f"-x{len(doc['gpus'])}.json"), name
        for sec_name, sec in doc["sections"].items():
            assert sec["command"] and sec["rows"], f"{name}: {sec_name}"
            for r in sec["rows"]:
                assert ROW_KEYS <= r.keys(), f"{name}: {sec_name}: {r}"
