#!/usr/bin/env bash
# What each client costs, against release servers:
#
# 1. IDs per second to one caller with the buffer: the Rust client (`snowmint bench --method
#    buffered --concurrency 1`), Go, Python (blocking and asyncio), Java and TypeScript, each for
#    --duration seconds, in --rounds interleaved rounds so that a drift of the machine's speed
#    touches every client alike; then the median of each. With --baseline REV, the same
#    benchmarks of the clients at git revision REV run in the same rounds, each right after
#    the current one (REV's release binary is built in a worktree, on this tree's target dir).
# 2. What a lightly used buffered client costs the server: each client's conformance driver
#    takes 10 IDs a second for --paced-seconds from a buffered client with the default
#    settings, each against a server of its own, and the server's counter says how many IDs
#    it minted meanwhile (clients/conformance/paced_cost.py).
#
#   scripts/measure/bench-clients.sh [--rounds 3] [--duration 5] [--paced-seconds 30] [--baseline REV]
#
# The Python client needs its .venv and the drivers their builds: clients/conformance/test.sh
# makes both (it runs the conformance suite too).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
rounds=3
duration=5
paced=30
baseline=
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --duration) duration=$2; shift 2 ;;
    --paced-seconds) paced=$2; shift 2 ;;
    --baseline) baseline=$2; shift 2 ;;
    *) echo "usage: scripts/measure/bench-clients.sh [--rounds N] [--duration SECONDS] [--paced-seconds SECONDS] [--baseline REV]" >&2; exit 2 ;;
  esac
done
if [ ! -x clients/python/.venv/bin/python ] || [ ! -x clients/go/.bin/conformance ]; then
  echo "scripts/measure/bench-clients.sh: run clients/conformance/test.sh once first (it makes the Python .venv and the drivers)" >&2
  exit 1
fi
target=${CARGO_TARGET_DIR:-$root/target}

work=$(mktemp -d)
server=
cleanup() {
  [ -n "$server" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
  if [ -n "$baseline" ] && [ -d "$work/baseline" ]; then
    git worktree remove --force "$work/baseline" >/dev/null 2>&1 || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

if [ -n "$baseline" ]; then
  echo "== the baseline: $baseline"
  git worktree add --detach "$work/baseline" "$baseline" >/dev/null
  (cd "$work/baseline" && CARGO_TARGET_DIR=$target cargo build --release --locked -q --bin snowmint)
  cp "$target/release/snowmint" "$work/baseline.snowmint"
  (cd "$work/baseline/clients/python" && python3 -m venv .venv && .venv/bin/python -m pip install -q -e .)
fi
cargo build --release --locked -q --bin snowmint

"$target/release/snowmint" serve --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 \
  --state-dir "$work/state" --log-format json 2>"$work/server.log" &
server=$!
addr=
for _ in $(seq 100); do
  addr=$(grep -o '"grpc_addr":"[^"]*"' "$work/server.log" | head -1 | cut -d'"' -f4) || true
  [ -n "$addr" ] && break
  kill -0 "$server" 2>/dev/null || { cat "$work/server.log" >&2; exit 1; }
  sleep 0.1
done
[ -n "$addr" ] || { echo "the server did not start" >&2; exit 1; }
echo "server: $target/release/snowmint at $addr; load average: $(cut -d' ' -f1-3 /proc/loadavg)"

# bench TREE LABEL BINARY: one round of every client of TREE, each line "LABEL client: N IDs/s".
bench() {
  local tree=$1 label=$2 bin=$3
  "$bin" bench --addr "http://$addr" --method buffered --concurrency 1 --duration "$duration" |
    awk -v l="$label" '/^IDs\/s/ { printf "%s rust: %s IDs/s\n", l, $2 }'
  (cd "$tree/clients/go" && go run ./cmd/bench -addr "$addr" -duration "${duration}s") | sed "s/^/$label /"
  "$tree/clients/python/.venv/bin/python" "$tree/clients/python/bench.py" --addr "$addr" --duration "$duration" |
    sed "s/^/$label /"
  "$tree/clients/python/.venv/bin/python" "$tree/clients/python/bench.py" --addr "$addr" --duration "$duration" \
    --asyncio | sed "s/^/$label /"
  "$tree/clients/java/bench.sh" --addr "http://$addr" --duration "$duration" | tail -1 | sed "s/^/$label /"
  "$tree/clients/typescript/bench.sh" --addr "http://$addr" --duration "$duration" | tail -1 | sed "s/^/$label /"
}

for round in $(seq "$rounds"); do
  echo "-- round $round (load average $(cut -d' ' -f1 /proc/loadavg))"
  bench "$root" now "$target/release/snowmint" | tee -a "$work/results"
  if [ -n "$baseline" ]; then
    bench "$work/baseline" "$baseline" "$work/baseline.snowmint" | tee -a "$work/results"
  fi
done

echo "-- medians of $rounds rounds of $duration s, IDs/s to one buffered caller"
python3 - "$work/results" <<'PY'
import re, statistics, sys
rates: dict[str, list[float]] = {}
for line in open(sys.argv[1]):
    label, rest = line.split(" ", 1)
    client = rest.split(",")[0].split(":")[0].strip()
    rate = re.search(r"([0-9]+) IDs/s", rest)
    if rate:
        rates.setdefault(f"{client} ({label})", []).append(float(rate.group(1)))
for name, values in rates.items():
    print(f"{name}: median {statistics.median(values):,.0f} IDs/s; rounds {', '.join(f'{v:,.0f}' for v in values)}")
PY

echo "-- a buffered client used 10 times a second for $paced s: IDs minted for it"
(cd clients/conformance && SNOWMINT_BIN=$target/release/snowmint python3 paced_cost.py --seconds "$paced")
