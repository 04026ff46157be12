"""python -m nvshmem_tutorial.guide --benchmark | --analyze | --pitfalls (see __init__.py)."""
import argparse
import sys


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m nvshmem_tutorial.guide",
                                 description="When symmetric memory beats NCCL on this machine, measured.")
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--benchmark", action="store_true", help="measure here (run under torchrun on the GPUs)")
    mode.add_argument("--analyze", action="store_true", help="print the decision tree of the newest measurement")
    mode.add_argument("--pitfalls", action="store_true", help="the checked mistakes and the error each gives here")
    ap.add_argument("--from", dest="source", default="bench/baselines",
                    help="--analyze: a results JSON, or a folder of them (default bench/baselines)")
    ap.add_argument("--json", help="--benchmark: where to write the results")
    ap.add_argument("--max-bytes", type=int, default=1 << 30, help="--benchmark: the largest size (default 1 GB)")
    ap.add_argument("--budget-s", type=float, default=480,
                    help="--benchmark: start no new size after this many seconds (default 480)")
    a = ap.parse_args()
    if a.pitfalls:
        from .pitfalls import run as run_pitfalls

        return run_pitfalls()
    if a.analyze:
        from .analyze import tree
        from .results import newest_multi_gpu

        found = newest_multi_gpu(a.source)
        if found is None:
            print(f"nvshmem_tutorial.guide --analyze: no measurement of two GPUs or more in {a.source}; make one "
                  "with --benchmark under torchrun on such a machine (or pass --from FILE)", file=sys.stderr)
            return 1
        path, doc = found
        where = path + (f", sections {', '.join(doc['sections'])}" if doc.get("sections") else "")
        print(f"Measured on {doc.get('machine', '?')}, {doc.get('date', '?')}, commit {doc.get('commit', '?')} "
              f"({where}):\n")
        for line in tree(doc):
            print(line)
        return 0
    if a.max_bytes < 1024:
        ap.error("--max-bytes must be at least 1024")
    if not a.budget_s > 0:
        ap.error("--budget-s must be positive")
    from .benchmark import run as run_benchmark

    return run_benchmark(a.json, a.max_bytes, a.budget_s)


if __name__ == "__main__":
    sys.exit(main())
