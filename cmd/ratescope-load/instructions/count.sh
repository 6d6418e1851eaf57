#!/usr/bin/env bash
# What one script call costs redis-server in CPU instructions, counted by
# valgrind's callgrind: exact and repeatable to a percent or two, where CPU
# time on a shared or virtual machine varies by a tenth from run to run. For
# comparing two versions of a script, or a script against single commands.
#
# Each SCRIPT (default: the log's check script as the limiter loads it, the
# lock and quota parts first) runs on a fresh redis-server under callgrind:
# CALLS calls (default 20,000) of EVALSHA from redis-benchmark (2 connections,
# 8 calls a pipeline) as warm-up, then CALLS more counted. Each call checks a
# random one of KEYS keys (default 1,000) under one rule of limit 100,000 and
# window WINDOW ms (default 1000): under callgrind about 1,500 calls a second
# get through, so each log holds one or two entries, and one expires about
# every call, as under steady traffic. Prints instructions per call.
#
#   bash cmd/ratescope-load/instructions/count.sh
#   bash cmd/ratescope-load/instructions/count.sh /tmp/before.lua /tmp/after.lua
#
# The instructions are redis-server's own (its Lua included), not the
# kernel's: a script's socket reads and writes, shared by a pipeline, are not
# in them. Needs valgrind, redis-server, redis-benchmark and redis-cli.
set -euo pipefail
cd "$(dirname "$0")/../../.."
for c in valgrind callgrind_control redis-server redis-benchmark redis-cli python3; do
  command -v $c >/dev/null || { echo "count.sh: $c is not on PATH" >&2; exit 1; }
done
calls=${CALLS:-20000} keys=${KEYS:-1000} window=${WINDOW:-1000}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ $# -eq 0 ]; then
  cat limiter/lock.lua limiter/quota.lua limiter/check.lua >"$tmp/check.lua"
  set -- "$tmp/check.lua"
fi
for script in "$@"; do
  port=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
  valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$tmp/callgrind.%p" \
    redis-server --port "$port" --save '' --appendonly no >"$tmp/redis.log" 2>&1 &
  vg=$!
  for _ in $(seq 150); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.2; done
  sha=$(redis-cli -p "$port" script load "$(cat "$script")")
  bench() {
    redis-benchmark -p "$port" -n "$calls" -P 8 -c 2 -r "$keys" -q \
      evalsha "$sha" 1 "rl:{__rand_int__}:p" 1 "m__rand_int__" 1000 100000 "$window" >/dev/null
  }
  bench
  callgrind_control -i on "$vg" >/dev/null 2>&1
  bench
  callgrind_control -i off "$vg" >/dev/null 2>&1
  redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
  wait "$vg" || true
  ir=$(awk '/Collected :/ {print $4}' "$tmp/redis.log")
  printf '%s: %d instructions a call\n' "$script" $((ir / calls))
done
