#!/usr/bin/env bash
# Fetches the pinned DeepSpeed and megatron-core (course lessons 3.4 and 3.5)
# with their dependencies as wheels for the GPU machines' Python 3.12, into
# .whl/course (ignored by git), so that a machine without network installs
# them with:
#   python3 -m pip install --no-index --find-links .whl/course deepspeed==0.16.4 megatron-core==0.16.1
# DeepSpeed publishes only a source archive; it builds here into a
# pure-Python wheel (its C++/CUDA ops stay unbuilt: the lessons use none).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=.whl/course
mkdir -p "$OUT"
PY312=(--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
       --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
python3 -m pip download -q --disable-pip-version-check -d "$OUT" "${PY312[@]}" --no-deps \
  megatron-core==0.16.1 hjson==3.1.0 msgpack==1.2.4 ninja==1.13.2 psutil==7.2.2 py-cpuinfo==9.0.0 \
  tqdm==4.70.1 einops==0.8.2 nvidia-ml-py==13.615.71 pydantic==2.13.4 pydantic-core==2.46.4 \
  annotated-types==0.7.0 typing-inspection==0.4.2 typing-extensions==4.15.0
if ! ls "$OUT"/deepspeed-0.16.4-py3-none-any.whl > /dev/null 2>&1; then
  python3 -m pip wheel -q --disable-pip-version-check --no-deps -w "$OUT" deepspeed==0.16.4
fi
ls "$OUT"
