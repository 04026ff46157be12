#!/usr/bin/env bash
# `pip install .` works: builds the package with scikit-build-core into a
# scratch folder, imports it from there (not from build/python), and runs a
# 2-PE job on host-memory PEs. Then `pip install -e .` (the seed's install
# command) into a scratch virtual environment, reusing that build: the
# package's .py files load from the source tree (so an edit is seen on the
# next import, without reinstalling) and the same job runs. Called by ctest
# (python_pip_install).
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

# Editable: a venv that sees this Python's packages (numpy, the build tools).
"$PY" -m venv --system-site-packages "$DEST/venv"
"$DEST/venv/bin/python" -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps -e "$ROOT" \
  2>&1 | grep -v "Running pip as the 'root'" || true
cd "$DEST"
NVST_HEAP=host "$DEST/venv/bin/python" - "$ROOT" <<'PY'
import importlib, os, sys
import nvshmem_tutorial as nt
src = os.path.join(sys.argv[1], "python", "nvshmem_tutorial")
# Loaded from the source files themselves: the next import reads an edit.
for mod in (nt, importlib.import_module("nvshmem_tutorial.bootstrap")):
    assert os.path.realpath(mod.__file__).startswith(os.path.realpath(src) + os.sep), (mod.__file__, src)
assert nt._nvst.n_pes is not None  # the compiled module came along
print("editable nvshmem_tutorial: .py files from", src)
PY
# The 2-PE job from the editable install.
sed 's/startswith(os.path.dirname(os.path.abspath(__file__)))/startswith(os.environ["NVST_SRC"])/' \
  "$DEST/smoke.py" > "$DEST/smoke_editable.py"
NVST_SRC="$ROOT/python/nvshmem_tutorial" NVST_HEAP=host "$DEST/venv/bin/python" smoke_editable.py
