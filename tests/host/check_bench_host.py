"""`nvst bench host` end to end on host-memory PEs (what it runs without a
GPU): every row's data checked (#wrong 0), ours beside raw libfabric at
every put size and in the ping-pong, and the JSON written.

    python3 tests/host/check_bench_host.py build/bin/nvst
"""
import json
import subprocess
import sys
import tempfile


def main(nvst: str) -> None:
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        cmd = [nvst, "bench", "host", "--np", "2", "-b", "4K", "-e", "64K", "-f", "4", "-n", "3", "-w", "1",
               "--samples", "3", "--json", out.name]
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if run.returncode != 0:
            sys.exit(f"{' '.join(cmd)} exited {run.returncode}:\n{run.stdout}\n{run.stderr}")
        rows = json.load(open(out.name))["rows"]
    bad = [r for r in rows if r["wrong"] != 0]
    assert not bad, f"rows with wrong data: {bad}"
    puts = {(r["impl"], r["bytes"]) for r in rows if r["op"] == "fabric_put"}
    for size in (4096, 16384, 65536):
        for impl in ("nvst", "raw_fabric"):
            assert (impl, size) in puts, f"no fabric_put row for {impl} at {size} bytes: {sorted(puts)}"
    pingpong = {r["impl"]: r["time_us"] for r in rows if r["op"].startswith("signal_pingpong")}
    assert set(pingpong) == {"nvst", "raw_fabric"} and all(t > 0 for t in pingpong.values()), pingpong
    print(f"bench host: {len(rows)} rows, every one right")


if __name__ == "__main__":
    main(sys.argv[1])
