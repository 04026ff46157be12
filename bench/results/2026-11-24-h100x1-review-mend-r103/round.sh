#!/usr/bin/env bash
# r103: the review mend (doorbells as proxy state, copy_pending) under the GPU
# suites across logical nodes.
OUT0=${OUT:-/tmp/out}
OUT=$OUT0/proxy bash scripts/device_round.sh var/bin shared-proxy 2>&1 | grep -A8 "^--- summary"
EP_STRESS=200 OUT=$OUT0/ep bash scripts/device_round.sh var/bin shared-ep-hier 2>&1 | grep -A8 "^--- summary"
