#!/usr/bin/env bash
# Compares ratescope's WebSocket fan-out with the minimal coder/websocket server,
# each in its own process, measured by fanprobe in a third: RUNS runs (default 3),
# each of the rounds fanprobe is given (default 3), every run on fresh processes.
#
#   bash cmd/fanprobe/compare.sh                       # 2,000 viewers, 200 checks a round
#   RUNS=1 bash cmd/fanprobe/compare.sh --viewers 1000 --checks 100
#   ONLY=ratescope bash cmd/fanprobe/compare.sh --viewers 10000 --checks 50 --rounds 1
#
# ONLY=ratescope (or ONLY=minimal) runs that server alone: at 10,000 viewers the
# minimal server is itself saturated on a small machine, so a ratio says nothing, and
# what counts is ratescope's own figures — every check answered 200, none missing.
# fanprobe exits non-zero when any check was not answered 200; so does this script.
# Needs redis-server, curl and python3 (for free ports) on PATH. Measure on a quiet machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/ratescope" . && go build -o "$bin/fanprobe" ./cmd/fanprobe
for c in redis-server curl python3; do command -v $c >/dev/null || { echo "compare.sh: $c is not on PATH" >&2; exit 1; }; done
free() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
cpu() { awk '{print ($14+$15)/100}' "/proc/$1/stat"; }
only=${ONLY:-}
case "$only" in ""|ratescope|minimal) ;; *) echo "compare.sh: ONLY is ratescope or minimal, not $only" >&2; exit 2 ;; esac
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(--viewers 2000 --checks 200 --rounds 3)
for run in $(seq "${RUNS:-3}"); do
  echo "## run $run ($(date -u +%H:%M:%S) UTC; load $(cut -d' ' -f1-3 /proc/loadavg))"
  rp=$(free) sp=$(free)
  redis-server --port "$rp" --save '' --appendonly no >"$bin/redis.log" 2>&1 & rpid=$!
  sleep 0.3
  REDIS_URL=redis://127.0.0.1:$rp "$bin/ratescope" --addr "127.0.0.1:$sp" --policy fan=100000/1m \
    --max-conns-per-client 0 --max-viewers 0 --max-viewers-per-client 0 --log-level warn >"$bin/ratescope.log" 2>&1 & spid=$!
  mpid=
  if [ "$only" != ratescope ]; then "$bin/fanprobe" minimal --addr 127.0.0.1:0 >"$bin/minimal.addr" 2>"$bin/minimal.log" & mpid=$!; fi
  for i in $(seq 100); do
    curl -fs "http://127.0.0.1:$sp/healthz" >/dev/null && { [ -z "$mpid" ] || [ -s "$bin/minimal.addr" ]; } && break
    [ "$i" = 100 ] && { echo "compare.sh: the servers did not start" >&2; cat "$bin"/*.log >&2; kill $spid $mpid $rpid; exit 1; }
    sleep 0.1
  done
  servers=()
  [ "$only" = minimal ] || servers+=(--server "ratescope=http://127.0.0.1:$sp")
  [ -z "$mpid" ] || servers+=(--server "minimal=$(cat "$bin/minimal.addr")")
  "$bin/fanprobe" "${servers[@]}" "${args[@]}" || status=$?
  echo
  echo "CPU seconds over the run: ratescope $(cpu $spid)${mpid:+, minimal $(cpu $mpid)}, redis-server $(cpu $rpid)"
  echo
  kill $spid $mpid $rpid; wait $spid $mpid $rpid 2>/dev/null || true
  [ -z "${status:-}" ] || exit "$status"
done
