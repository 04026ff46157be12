# Sourced by scripts/gpu_check.sh and scripts/bench.sh: runs steps with a
# time limit, a log each and a line of progress, and prints a summary table.
#   run_step NAME SETTINGS LIMIT_S CMD...   SETTINGS: "K=V K=V" set for CMD, or "-"
#   print_summary                           the table; returns 1 if a step failed
# Exit status 77 means the step skipped itself (too few GPUs, no PyTorch).
: "${LOG_DIR:?set LOG_DIR before sourcing steps.sh}"
STEP_ROWS=()
STEP_FAILED=0

run_step() {
  local name=$1 settings=$2 limit=$3
  shift 3
  local log="$LOG_DIR/$name.log" t0=$SECONDS rc verdict
  local -a envs=()
  [ "$settings" != "-" ] && read -r -a envs <<< "$settings"
  printf '%s  %-26s %-64s ' "$(date +%H:%M:%S)" "$name" "$settings"
  timeout -k 10 "$limit" env ${envs[@]+"${envs[@]}"} "$@" > "$log" 2>&1
  rc=$?
  case $rc in
    0) verdict=pass ;;
    77) verdict=skip ;;
    124|137) verdict="FAIL (over ${limit} s)"; STEP_FAILED=1 ;;
    *) verdict="FAIL (exit $rc)"; STEP_FAILED=1 ;;
  esac
  local secs=$((SECONDS - t0))
  echo "$verdict, ${secs} s"
  [ "${verdict:0:4}" = FAIL ] && { tail -n 5 "$log" | sed 's/^/      | /'; }
  STEP_ROWS+=("$name|$settings|$verdict|$secs")
  return 0
}

print_summary() {
  echo
  printf '%-26s %-64s %-22s %8s\n' suite settings result seconds
  printf '%-26s %-64s %-22s %8s\n' ----- -------- ------ -------
  local row name settings verdict secs
  for row in "${STEP_ROWS[@]}"; do
    IFS='|' read -r name settings verdict secs <<< "$row"
    printf '%-26s %-64s %-22s %8s\n' "$name" "$settings" "$verdict" "$secs"
  done
  echo "logs: $LOG_DIR"
  return $STEP_FAILED
}
