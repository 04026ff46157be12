#!/usr/bin/env bash
# `pip install .` works: builds the package with scikit-build-core into a
# scratch folder, imports it from there (not from build/python), and runs a
# 2-PE job on host-memory PEs. Called by ctest (python_pip_install).
set -euo pipefail
PY=${1:-python3}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DEST=$(mktemp -d)
trap 'rm -rf "$DEST"' EXIT
cd "$ROOT"
"$PY" -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps --target "$DEST" . 2>&1 |
  grep -v "Running pip as the 'root'" || true
test -f "$DEST"/nvshmem_tutorial/__init__.py || { echo "pip install . installed no nvshmem_tutorial" >&2; exit 1; }
# A file, not stdin: launch() spawns processes that re-import __main__.
cat > "$DEST/smoke.py" <<'PY'
import os
import numpy as np
import nvshmem_tutorial as nt


def job(rank):
    x = np.full(16, rank + 1, dtype=np.float32)
    nt.all_reduce(x, x, "sum")
    return float(x[0])


if __name__ == "__main__":
    assert nt.__file__.startswith(os.path.dirname(os.path.abspath(__file__))), nt.__file__
    got = nt.launch(2, job)
    print("pip-installed nvshmem_tutorial:", got)
    assert got == [3.0, 3.0], got
PY
cd "$DEST"
PYTHONPATH="$DEST" NVST_HEAP=host "$PY" smoke.py
