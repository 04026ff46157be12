#!/usr/bin/env bash
# Lint: clang-format over the C++/CUDA sources (.clang-format), ruff and
# mypy over the Python package and its tests (pyproject.toml). The tools are
# the versions scripts/install_deps.sh pins.
#   scripts/lint.sh          check; exit 1 naming what is off
#   scripts/lint.sh --fix    apply clang-format and ruff --fix, then check
set -uo pipefail
cd "$(dirname "$0")/.."
FIX=0
case "${1:-}" in
  --fix) FIX=1 ;;
  "") ;;
  *) echo "usage: scripts/lint.sh [--fix]" >&2; exit 2 ;;
esac

CLANG_FORMAT=$(python3 -c 'import clang_format; print(clang_format.get_executable("clang-format"))' 2>/dev/null) ||
  { echo "lint: the clang-format wheel is missing: bash scripts/install_deps.sh" >&2; exit 1; }
python3 -m ruff --version >/dev/null 2>&1 && python3 -m mypy --version >/dev/null 2>&1 ||
  { echo "lint: ruff or mypy is missing: bash scripts/install_deps.sh" >&2; exit 1; }

# Tracked files (plus new ones not ignored), so build folders never count.
git rev-parse --is-inside-work-tree >/dev/null 2>&1 || { echo "lint: needs a git checkout (it lints git's files)" >&2; exit 1; }
mapfile -t CXX_FILES < <(git ls-files --cached --others --exclude-standard -- '*.cpp' '*.hpp' '*.cu' '*.cuh' '*.h' |
                         while read -r f; do [ -f "$f" ] && echo "$f"; done)
PY_PATHS=(python tests/python tests/layers)
failed=()

if [ $FIX -eq 1 ]; then
  printf '%s\0' "${CXX_FILES[@]}" | xargs -0 -n 32 "$CLANG_FORMAT" -i
  python3 -m ruff check --fix --quiet "${PY_PATHS[@]}" || true
fi

# clang-format: the files whose formatting differs, with a count of lines.
unformatted=0
for f in "${CXX_FILES[@]}"; do
  n=$("$CLANG_FORMAT" "$f" | diff "$f" - | grep -c '^<')
  if [ "$n" -gt 0 ]; then
    echo "clang-format: $f: $n line(s) differ"
    unformatted=$((unformatted + 1))
  fi
done
[ $unformatted -eq 0 ] || failed+=("clang-format ($unformatted of ${#CXX_FILES[@]} files; scripts/lint.sh --fix)")

python3 -m ruff check --quiet "${PY_PATHS[@]}" || failed+=("ruff")
python3 -m mypy || failed+=("mypy")

if [ ${#failed[@]} -gt 0 ]; then
  echo "lint: failed: ${failed[*]}" >&2
  exit 1
fi
echo "lint: clang-format (${#CXX_FILES[@]} files), ruff and mypy clean"
