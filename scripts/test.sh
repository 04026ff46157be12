#!/usr/bin/env bash
# The test command: installs dependencies, lints, builds everything, runs the
# tests, and prints the time of each stage and the total. GPU tests skip
# (exit 77) where there are too few GPUs. A failing lint does not stop the
# build and tests; the command fails at the end if any stage failed.
# Arguments go to ctest.
set -uo pipefail
cd "$(dirname "$0")/.."
T0=$SECONDS
STAGES=()
FAILED=()
# stage NAME COMMAND...: runs it, timed; records a failure.
stage() {
  local name=$1 t=$SECONDS rc=0
  shift
  echo "=== $name"
  "$@" || rc=$?
  STAGES+=("$(printf '%-8s %6d s%s' "$name" $((SECONDS - t)) "$([ $rc -eq 0 ] || echo "  FAILED (exit $rc)")")")
  [ $rc -eq 0 ] || FAILED+=("$name")
  return $rc
}
summary() {
  echo "=== time per stage"
  printf '%s\n' "${STAGES[@]}"
  printf '%-8s %6d s\n' total $((SECONDS - T0))
}
trap summary EXIT

stage deps bash scripts/install_deps.sh || exit 1
source scripts/env.sh
stage lint bash scripts/lint.sh
stage build bash scripts/build.sh || exit 1
stage ctest "$CTEST" --test-dir "$BUILD_DIR" --output-on-failure --timeout 600 "$@"
if [ ${#FAILED[@]} -gt 0 ]; then
  echo "test.sh: failed: ${FAILED[*]}" >&2
  exit 1
fi
