#!/usr/bin/env bash
# IDs per second to one caller with the buffer, per client, against one release server: the
# Rust client (`snowmint bench --method buffered --concurrency 1`), then Go, Python (blocking
# and asyncio), Java and TypeScript, each for --duration seconds, in --rounds interleaved
# rounds so that a drift of the machine's speed touches every client alike.
#
#   scripts/bench-clients.sh [--rounds 2] [--duration 5]
#
# Builds the release binary; the Python client needs its .venv (clients/python/test.sh makes
# it), the others build themselves.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=2
duration=5
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --duration) duration=$2; shift 2 ;;
    *) echo "usage: scripts/bench-clients.sh [--rounds N] [--duration SECONDS]" >&2; exit 2 ;;
  esac
done
if [ ! -x clients/python/.venv/bin/python ]; then
  echo "scripts/bench-clients.sh: run clients/python/test.sh once first (it makes clients/python/.venv)" >&2
  exit 1
fi
cargo build --release --locked --bin snowmint

work=$(mktemp -d)
target/release/snowmint serve --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 \
  --state-dir "$work/state" --log-format json 2>"$work/server.log" &
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null; rm -rf "$work"' EXIT
addr=
for _ in $(seq 100); do
  addr=$(grep -o '"grpc_addr":"[^"]*"' "$work/server.log" | head -1 | cut -d'"' -f4) || true
  [ -n "$addr" ] && break
  kill -0 "$server" 2>/dev/null || { cat "$work/server.log" >&2; exit 1; }
  sleep 0.1
done
[ -n "$addr" ] || { echo "the server did not start" >&2; exit 1; }
echo "server: target/release/snowmint at $addr; load average: $(cut -d' ' -f1-3 /proc/loadavg)"

for round in $(seq "$rounds"); do
  echo "-- round $round"
  target/release/snowmint bench --addr "http://$addr" --method buffered --concurrency 1 --duration "$duration" |
    awk '/^IDs\/s/ { printf "rust client, buffered, 1 caller: %s IDs/s\n", $2 }'
  (cd clients/go && go run ./cmd/bench -addr "$addr" -duration "${duration}s")
  clients/python/.venv/bin/python clients/python/bench.py --addr "$addr" --duration "$duration"
  clients/python/.venv/bin/python clients/python/bench.py --addr "$addr" --duration "$duration" --asyncio
  clients/java/bench.sh --addr "http://$addr" --duration "$duration" | tail -1
  clients/typescript/bench.sh --addr "http://$addr" --duration "$duration" | tail -1
done
