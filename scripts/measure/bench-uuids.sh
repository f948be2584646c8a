#!/usr/bin/env bash
# UUIDs beside IDs, on one release server on loopback, in interleaved rounds (the table shows
# each figure's median):
#
#   - NextUuid beside NextId: calls/s with 64 calls in flight over 4 connections (the
#     target: a single UUID call within 10% of NextId), and p50/p99 of one caller alone;
#   - BatchUuids(4096) beside BatchIds(4096), 16 in flight: UUIDs/s and IDs/s against the
#     layout's ceiling of 4,096,000 a second per slot (the target: the same ceiling).
#
# Every run checks that what it received is unique (snowmint bench fails otherwise).
#
#   scripts/measure/bench-uuids.sh [--duration SECONDS] [--rounds N]
set -euo pipefail
cd "$(dirname "$0")/../.."

. scripts/measure/lib.sh
measure_args "$@"

cargo build --release --locked -q
bin=target/release/snowmint
work=$(mktemp -d)
server=
cleanup() {
  if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

grpc_port=$(free_port)
admin_port=$(free_port)
"$bin" serve --listen "127.0.0.1:$grpc_port" --admin-listen "127.0.0.1:$admin_port" \
  --state-dir "$work/state" --log-format json 2>>"$work/snowmint.log" &
server=$!
for _ in $(seq 100); do
  "$bin" next --addr "http://127.0.0.1:$grpc_port" >/dev/null 2>&1 && break
  sleep 0.1
done

bench() { "$bin" bench --addr "http://127.0.0.1:$grpc_port" --duration "$duration" "$@"; }
latency_ms() { python3 scripts/measure/latency_ms.py "$1" "$2"; }

declare -A runs
for round in $(seq "$rounds"); do
  for method in next next-uuid; do
    bench --method "$method" --concurrency 64 --connections 4 >"$work/$method.txt"
    runs[$method-rps]+=" $(field calls/s "$work/$method.txt")"
    bench --method "$method" --concurrency 1 --connections 1 >"$work/$method-1.txt"
    runs[$method-p50]+=" $(latency_ms "$work/$method-1.txt" p50)"
    runs[$method-p99]+=" $(latency_ms "$work/$method-1.txt" p99)"
  done
  for method in batch batch-uuids; do
    bench --method "$method" --batch-size 4096 --concurrency 16 --connections 4 >"$work/$method.txt"
    runs[$method]+=" $(field IDs/s "$work/$method.txt")"
  done
  echo "round $round of $rounds done" >&2
done

m() { median ${runs[$1]}; }
ratio() { python3 -c "print(f'{100 * $1 / $2:.1f}%')"; }
ceiling=4096000
cat <<TABLE
UUIDs beside IDs, one server, ${duration} s each, medians of $rounds interleaved rounds:

| call | calls/s, 64 in flight | one caller p50 | one caller p99 |
|---|---:|---:|---:|
| \`NextId\` | $(m next-rps) | $(m next-p50) ms | $(m next-p99) ms |
| \`NextUuid\` | $(m next-uuid-rps) ($(ratio "$(m next-uuid-rps)" "$(m next-rps)") of \`NextId\`) | $(m next-uuid-p50) ms | $(m next-uuid-p99) ms |

| call | per second, 16 in flight | of the ceiling (4,096,000) |
|---|---:|---:|
| \`BatchIds(4096)\` | $(m batch) IDs | $(ratio "$(m batch)" $ceiling) |
| \`BatchUuids(4096)\` | $(m batch-uuids) UUIDs | $(ratio "$(m batch-uuids)" $ceiling) |
TABLE
python3 - "$(m next-uuid-rps)" "$(m next-rps)" "$(m batch-uuids)" "$(m batch)" <<'PY'
import sys
uuid_rps, next_rps, uuids, ids = map(float, sys.argv[1:])
print(("met   " if uuid_rps >= 0.9 * next_rps else "MISSED ") + "NextUuid within 10% of NextId")
print(("met   " if uuids >= 0.9 * ids else "MISSED ") + "BatchUuids at the ceiling BatchIds reaches (within 10%)")
PY
