#!/usr/bin/env bash
# Installs what the build needs on a fresh Debian 12 / Ubuntu machine that
# already has the CUDA toolkit in /usr/local/cuda. Safe to run again: it
# skips what is present. Versions are pinned where they come from PyPI.
set -euo pipefail

APT_PACKAGES=(build-essential ninja-build ccache libfabric-dev libhwloc-dev libgtest-dev
              libbenchmark-dev libcli11-dev nlohmann-json3-dev python3-pip)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install_deps: apt-get install ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# From PyPI, pinned: CMake 3.31 (Debian's 3.25 cannot hand C++20 to nvcc 13);
# NVSHMEM 3.4.5, so the NVSHMEM backend and baseline build against the version
# they run with, also on a machine without a GPU; pybind11, numpy and pytest
# for the torch-free Python package and its tests; matplotlib for the plots
# scripts/render_results.py draws; cuobjdump and nvdisasm (the CUDA install
# here lacks them) to read a kernel's machine code; mkdocs with its theme and
# pymdown-extensions for the course's site (Pygments 2.18: pymdown-extensions
# 10.12 fails on newer ones); the linters of scripts/lint.sh (clang-format,
# ruff, mypy).
PIP_PACKAGES=(cmake==3.31.6 nvidia-nvshmem-cu13==3.4.5 pybind11==2.13.6 numpy==2.1.3 pytest==8.3.3
              scikit-build-core==0.10.7 matplotlib==3.9.2
              nvidia-cuda-cuobjdump==13.2.51 nvidia-cuda-nvdisasm==13.2.51
              mkdocs==1.6.1 mkdocs-material==9.5.49 pymdown-extensions==10.12 pygments==2.18.0
              clang-format==20.1.8 ruff==0.17.6 mypy==2.4.1)
need_pip=0
python3 - "${PIP_PACKAGES[@]}" <<'PY' || need_pip=1
import importlib.metadata as m, sys
for pin in sys.argv[1:]:
    name, version = pin.split("==")
    try:
        if m.version(name) != version:
            sys.exit(1)
    except m.PackageNotFoundError:
        sys.exit(1)
PY
if [ $need_pip -eq 1 ]; then
  echo "install_deps: pip install ${PIP_PACKAGES[*]}"
  python3 -m pip install -q --disable-pip-version-check "${PIP_PACKAGES[@]}" 2>&1 | grep -v "Running pip as the 'root'" || true
fi

if [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "install_deps: /usr/local/cuda/bin/nvcc not found: install the CUDA toolkit 13.0 first" >&2
  exit 1
fi
