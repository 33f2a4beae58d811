# Sourced by scripts that run a long, quiet step: `progress "what" "how long" CMD…` runs CMD
# with its output in a log and prints what is happening at the start, then every 30 s the
# time so far and the log's last line (a build's "[ 45%] Building …"), so a person never
# watches a silent terminal. On failure the log's tail is shown and the status returned.
progress() {
  local what="$1" eta="$2"; shift 2
  local log; log=$(mktemp "${TMPDIR:-/tmp}/maka-progress.XXXXXX")
  echo "== $what (about $eta; progress every 30 s)" >&2
  local start=$SECONDS
  "$@" >"$log" 2>&1 &
  local pid=$! next=$((SECONDS + 30))
  while kill -0 "$pid" 2>/dev/null; do
    if [ "$SECONDS" -ge "$next" ]; then
      local last; last=$(tail -c 2000 "$log" | tr '\r' '\n' | grep -v '^[[:space:]]*$' | tail -1 | cut -c1-100)
      echo "   … $((SECONDS - start)) s: ${last:-working}" >&2
      next=$((SECONDS + 30))
    fi
    sleep 1
  done
  local status=0
  wait "$pid" || status=$?
  if [ "$status" -ne 0 ]; then
    echo "   $what failed (exit $status); the last lines of its output:" >&2
    tail -30 "$log" >&2
  else
    echo "   done in $((SECONDS - start)) s" >&2
  fi
  rm -f "$log"
  return "$status"
}
