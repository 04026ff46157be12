"""The decision guide without a GPU: --analyze on measurements (crossovers
computed from known rows, the newest multi-GPU file chosen) and --pitfalls
(each checked mistake made on host-memory PEs gives its error)."""
import json
import os
import subprocess
import sys

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


def test_pitfalls_each_checked_mistake_gives_its_error():
    out = subprocess.run([sys.executable, "-m", "nvshmem_tutorial.guide", "--pitfalls"], capture_output=True,
                         text=True, timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    assert "NO ERROR" not in text
    for expected in ("symmetric heap", "timed out", "full on PE", "shape", "out of range"):
        assert expected in text, (expected, text)
