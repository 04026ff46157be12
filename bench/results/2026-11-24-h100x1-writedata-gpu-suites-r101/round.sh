#!/usr/bin/env bash
# r101: the writedata doorbell under the GPU suites that go through the proxy:
# the device API across logical nodes (tcp, shm, 3 PEs), the EP Buffer as
# 1+1, 2x2 and 3x2 logical nodes.
OUT0=${OUT:-/tmp/out}
OUT=$OUT0/proxy bash scripts/device_round.sh var/bin shared-proxy 2>&1 | tail -n 30
EP_STRESS=200 OUT=$OUT0/ep bash scripts/device_round.sh var/bin shared-ep-hier 2>&1 | tail -n 30
