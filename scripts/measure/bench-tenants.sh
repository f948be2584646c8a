#!/usr/bin/env bash
# The cost of tenants, on one release server on loopback, in interleaved rounds (the table
# shows each figure's median): the same server without a policy, and with a policy of 100
# tenants (each with a token, a rate far above the load, every permission) and a token on
# every call.
#
#   - NextId: calls/s with 64 calls in flight over 4 connections (the target: with the
#     policy, at least 90% of the calls/s without);
#   - BatchIds(4096): IDs/s with 16 in flight over 4 connections.
#
# Every run checks that what it received is unique (snowmint bench fails otherwise).
#
#   scripts/measure/bench-tenants.sh [--duration SECONDS] [--rounds N]
set -euo pipefail
cd "$(dirname "$0")/../.."

. scripts/measure/lib.sh
measure_args "$@"

cargo build --release --locked -q
bin=target/release/snowmint
work=$(mktemp -d)
server=
stop_server() {
  if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi
  server=
}
cleanup() {
  stop_server
  rm -rf "$work"
}
trap cleanup EXIT

# 100 tenants, each with a token; the load runs as the last one's.
: >"$work/policy.toml"
: >"$work/tokens"
for i in $(seq 1 100); do
  "$bin" token new "t$i" >"$work/t$i.token"
  tail -n 1 "$work/t$i.token" >>"$work/tokens"
  cat >>"$work/policy.toml" <<TOML
[tenant.tenant-$i]
tokens = ["t$i"]
allow = ["ids", "uuids", "sequences", "decode", "provenance", "reveal"]
rate = 100000000
burst = 100000000
TOML
done
token=$(head -n 1 "$work/t100.token")

grpc_port=$(free_port)
admin_port=$(free_port)
# start_server [FLAGS...]: a fresh state dir each time, on the same ports.
start_server() {
  rm -rf "$work/state"
  "$bin" serve --listen "127.0.0.1:$grpc_port" --admin-listen "127.0.0.1:$admin_port" \
    --state-dir "$work/state" --log-format json "$@" 2>>"$work/snowmint.log" &
  server=$!
  for _ in $(seq 100); do
    curl -s -o /dev/null "http://127.0.0.1:$admin_port/readyz" && return 0
    sleep 0.1
  done
  echo "the server did not start: $work/snowmint.log" >&2
  exit 1
}

bench() { "$bin" bench --addr "http://127.0.0.1:$grpc_port" --duration "$duration" "$@"; }

declare -A next batch
for round in $(seq 1 "$rounds"); do
  for mode in none policy; do
    if [ "$mode" = policy ]; then
      start_server --policy-file "$work/policy.toml" --token-file "$work/tokens"
      auth=(--token "$token")
    else
      start_server
      auth=()
    fi
    bench --method next --concurrency 64 --connections 4 "${auth[@]}" >"$work/next.txt"
    bench --method batch --batch-size 4096 --concurrency 16 --connections 4 "${auth[@]}" >"$work/batch.txt"
    next[$mode]+=" $(field calls/s "$work/next.txt")"
    batch[$mode]+=" $(field IDs/s "$work/batch.txt")"
    stop_server
  done
  echo "round $round of $rounds done" >&2
done

# shellcheck disable=SC2086
{
  n0=$(median ${next[none]}); n1=$(median ${next[policy]})
  b0=$(median ${batch[none]}); b1=$(median ${batch[policy]})
  printf '| call | without a policy | 100 tenants, a token a call | ratio |\n|---|---|---|---|\n'
  printf '| NextId, 64 in flight (calls/s) | %.0f | %.0f | %.1f%% |\n' "$n0" "$n1" "$(echo "$n1 * 100 / $n0" | bc -l)"
  printf '| BatchIds(4096), 16 in flight (IDs/s) | %.0f | %.0f | %.1f%% |\n' "$b0" "$b1" "$(echo "$b1 * 100 / $b0" | bc -l)"
}
