#!/usr/bin/env bash
# The HTTP check path against the same server's /healthz, measured from outside
# with wrk (one thread, 64 keep-alive connections): RUNS runs (default 3), each
# on a fresh redis-server and server, each running /healthz, the all-allowed
# check and the flood in turn for DURATION (default 5s) after a 1 s warm-up.
# Prints requests/s and check ÷ healthz per run, and the CPU each process spent.
#
#   bash cmd/ratescope-load/wrk/compare.sh
#   RUNS=1 DURATION=3s bash cmd/ratescope-load/wrk/compare.sh
#
# Needs wrk, redis-server, curl and python3 on PATH. Measure on a quiet machine.
set -euo pipefail
cd "$(dirname "$0")/../../.."
here=cmd/ratescope-load/wrk
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/ratescope" .
for c in wrk redis-server curl python3; do command -v $c >/dev/null || { echo "compare.sh: $c is not on PATH" >&2; exit 1; }; done
free() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
cpu() { awk '{print ($14+$15)/100}' "/proc/$1/stat"; }
rate() { awk '/^Requests\/sec:/{print $2}' "$1"; }
d=${DURATION:-5s}
for run in $(seq "${RUNS:-3}"); do
  echo "## run $run ($(date -u +%H:%M:%S) UTC; load $(cut -d' ' -f1-3 /proc/loadavg))"
  rp=$(free) sp=$(free)
  redis-server --port "$rp" --save '' --appendonly no >"$bin/redis.log" 2>&1 & rpid=$!
  sleep 0.3
  REDIS_URL=redis://127.0.0.1:$rp "$bin/ratescope" --addr "127.0.0.1:$sp" \
    --policy load=100000/1s --policy flood=10/1h --max-conns-per-client 0 --log-level warn >"$bin/ratescope.log" 2>&1 & spid=$!
  for i in $(seq 100); do
    curl -fs "http://127.0.0.1:$sp/healthz" >/dev/null && break
    [ "$i" = 100 ] && { echo "compare.sh: the server did not start" >&2; cat "$bin"/*.log >&2; kill $spid $rpid; exit 1; }
    sleep 0.1
  done
  for k in $(seq 0 99); do # the flood's hot keys, past their limit
    for _ in $(seq 11); do curl -s -o /dev/null -X POST "http://127.0.0.1:$sp/api/v1/check?key=hot-$k&policy=flood"; done
  done
  declare -A rps
  for what in healthz check flood; do
    wrk -t1 -c64 -d1s -s "$here/$what.lua" "http://127.0.0.1:$sp" >/dev/null
    s0=$(cpu $spid) r0=$(cpu $rpid)
    wrk -t1 -c64 -d"$d" -s "$here/$what.lua" "http://127.0.0.1:$sp" >"$bin/$what.out"
    s1=$(cpu $spid) r1=$(cpu $rpid)
    rps[$what]=$(rate "$bin/$what.out")
    n=$(awk '/requests in/{print $1}' "$bin/$what.out")
    errs=$(awk '/Socket errors|Non-2xx/{print}' "$bin/$what.out" | tr '\n' ' ')
    awk -v w="$what" -v r="${rps[$what]}" -v n="$n" -v s0="$s0" -v s1="$s1" -v r0="$r0" -v r1="$r1" -v e="$errs" \
      'BEGIN{printf "%-8s %9.0f req/s  server %5.1f µs/req  redis %5.1f µs/req  %s\n", w, r, (s1-s0)*1e6/n, (r1-r0)*1e6/n, e}'
  done
  awk -v h="${rps[healthz]}" -v c="${rps[check]}" -v f="${rps[flood]}" \
    'BEGIN{printf "check ÷ healthz: all allowed %.2f, flood %.2f\n\n", c/h, f/h}'
  kill $spid $rpid; wait $spid $rpid 2>/dev/null || true
done
