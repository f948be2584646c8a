#!/usr/bin/env bash
# snowmint side by side with ticket servers, in one run on this machine, all on loopback:
#
#   - NextId with 64 calls in flight (h2load), against Redis INCR (redis-benchmark, 64
#     clients, no pipelining) and a PostgreSQL sequence (pgbench running nextval, 64 clients);
#   - BatchIds(4096) IDs/s as a share of the layout's ceiling (4,096 IDs per ms per worker);
#   - the buffered Rust client's IDs/s to one caller and to 64 concurrent callers;
#   - the server's peak RSS under load, and p99 NextId latency at half the top throughput;
#   - mixed load (the minter's fair queue): NextId latency of one caller on a quiet instance
#     and beside a client saturating it with BatchIds(65536), 16 in flight; that bulk
#     client's IDs/s alone and beside the NextId caller, against the ceiling; and the shares
#     of two bulk clients of different batch sizes (65,536 and 4,096, 16 in flight each);
#     and 16, 64 and 256 bulk connections of BatchIds(65536), one call in flight on each,
#     with 1 s and with 200 ms deadlines, beside the NextId caller: goodput against the
#     ceiling and refusals, from the server's counters, and the NextId caller's p99;
#   - slots: BatchIds IDs/s of one instance holding k = 1, 4 and 8 worker slots, against
#     k x 4,096,000, and the buffered Rust client's IDs/s to one caller with k = 4; with
#     --peers, ferroid's tonic server (ferroid-tonic-server 2.0.0) at 1 and 128 workers,
#     through bench/ferroid-client;
#   - named sequences: scripts/measure/bench-sequences.sh (NextValue and BatchValues beside
#     NextId, BatchIds, PostgreSQL's nextval and Redis INCR and INCRBY).
#
# Prints Markdown tables (docs/performance.md) and how each target fared.
#
#   scripts/measure/bench.sh [--duration SECONDS] [--rounds N] [--mixed-only] [--slots-only] [--peers]
#                    [--fair-quantum IDS]
#
# --mixed-only runs the mixed-load measurements alone (no h2load, Redis or PostgreSQL);
# --fair-quantum runs their server with that quantum instead of the default. --slots-only
# runs the slots measurements alone (no h2load, Redis or PostgreSQL either); --peers adds
# ferroid to them, with or without --slots-only.
#
# Each measurement runs for --duration seconds (default 10). snowmint's NextId, Redis and
# PostgreSQL take turns for --rounds rounds (default 5), and the table shows each one's
# median; so do the slots measurements and ferroid's, among themselves.
#
# Installs h2load (nghttp2-client), Redis and PostgreSQL from Debian when missing. Must run
# as root for PostgreSQL (it runs the server as the postgres user); without root the
# PostgreSQL column is skipped. --peers installs ferroid-tonic-server with `cargo install`
# and builds bench/ferroid-client, both under ${XDG_CACHE_HOME:-~/.cache}/snowmint-peers
# (outside the repository; kept between runs). Their build needs protoc: the one on PATH, or
# the one snowmint's own build took from the protoc-bin-vendored crate.
set -euo pipefail
cd "$(dirname "$0")/../.."

duration=10
rounds=5
mixed_only=false
slots_only=false
peers=false
quantum=()
usage="usage: scripts/measure/bench.sh [--duration SECONDS] [--rounds N] [--mixed-only] [--slots-only] [--peers] [--fair-quantum IDS]"
while [ $# -gt 0 ]; do
  case "$1" in
    --duration) duration=$2; shift 2 ;;
    --duration=*) duration=${1#*=}; shift ;;
    --rounds) rounds=$2; shift 2 ;;
    --rounds=*) rounds=${1#*=}; shift ;;
    --mixed-only) mixed_only=true; shift ;;
    --slots-only) slots_only=true; shift ;;
    --peers) peers=true; shift ;;
    --fair-quantum) quantum=(--fair-quantum "$2"); shift 2 ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
done
if $mixed_only && $slots_only; then
  echo "--mixed-only and --slots-only each run one part alone: give one of them" >&2
  exit 2
fi

need=()
if ! $mixed_only && ! $slots_only; then
  command -v h2load >/dev/null || need+=(nghttp2-client)
  command -v redis-server >/dev/null && command -v redis-benchmark >/dev/null || need+=(redis-server redis-tools)
  command -v pgbench >/dev/null && ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql postgresql-contrib)
  if [ ${#need[@]} -gt 0 ]; then
    echo "installing ${need[*]}" >&2
    apt-get update -qq
    # No service starts: the script runs its own servers on free ports.
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
    rm -f /usr/sbin/policy-rc.d
  fi
fi

cargo build --release --locked -q
bin=target/release/snowmint

if $peers; then
  peers_dir=${XDG_CACHE_HOME:-$HOME/.cache}/snowmint-peers
  ferroid_server=$peers_dir/bin/ferroid-tonic-server
  ferroid_client=$peers_dir/target/release/ferroid-client
  # Both builds compile ferroid's proto: with the protoc on PATH or in $PROTOC, else with the
  # one snowmint's own build unpacked from the protoc-bin-vendored crate.
  if [ -z "${PROTOC:-}" ] && ! command -v protoc >/dev/null; then
    arch=$(uname -m | sed 's/aarch64/aarch_64/')
    PROTOC=$(ls "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/protoc-bin-vendored-linux-"$arch"-*/bin/protoc 2>/dev/null \
      | sort -V | tail -n 1 || true)
    if [ -z "$PROTOC" ]; then
      echo "--peers builds ferroid's proto and needs protoc: install protobuf-compiler or set PROTOC" >&2
      exit 1
    fi
    export PROTOC
  fi
  if [ ! -x "$ferroid_server" ]; then
    echo "installing ferroid-tonic-server 2.0.0 into $peers_dir" >&2
    cargo install ferroid-tonic-server --version 2.0.0 --locked --root "$peers_dir" -q
  fi
  cargo build --release --locked -q --manifest-path bench/ferroid-client/Cargo.toml --target-dir "$peers_dir/target"
fi

work=$(mktemp -d)
chmod 755 "$work"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  if [ -f "$work/pg/postmaster.pid" ]; then
    runuser -u postgres -- "$pg_bin/pg_ctl" -D "$work/pg" -m immediate stop >/dev/null 2>&1 || true
  fi
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
http_get() { python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1]).read().decode())' "$1"; }
metric() { http_get "http://127.0.0.1:$admin_port/metrics" | awk -v m="$1" '$1 == m { print $2 }'; }
# Peak resident set of a process, in MB.
peak_rss_mb() { awk '/VmHWM/ { printf "%.1f", $2 / 1024 }' "/proc/$1/status"; }

# start_server [serve flags...]: a snowmint server on fresh ports and a state dir of its own
# (several run at once, and none waits out another's reservations); sets server, grpc_port,
# admin_port, and returns once it mints.
start_server() {
  grpc_port=$(free_port)
  admin_port=$(free_port)
  "$bin" serve --listen "127.0.0.1:$grpc_port" --admin-listen "127.0.0.1:$admin_port" \
    --state-dir "$(mktemp -d "$work/state.XXXXXX")" --log-format json "$@" 2>>"$work/snowmint.log" &
  server=$!
  pids+=("$server")
  for _ in $(seq 100); do
    "$bin" next --addr "http://127.0.0.1:$grpc_port" >/dev/null 2>&1 && return
    sleep 0.1
  done
  echo "snowmint did not start; see its log:" >&2
  cat "$work/snowmint.log" >&2
  exit 1
}

# --- Mixed load: one caller asking for single IDs, one call at a time, beside bulk callers
# (the minter shares each tick among connections). Runs against a server with the default
# worker threads, as BatchIds below.
snowmint_bench() { "$bin" bench --addr "http://127.0.0.1:$grpc_port" "$@"; }
ids_per_s() { awk '/^IDs\/s/ { print $2 }' "$1"; }
# latency_ms FILE p50|p99|max: a latency of a `snowmint bench` report, in ms.
latency_ms() { python3 scripts/measure/latency_ms.py "$1" "$2"; }
pct() { python3 -c "print(f'{100 * $1 / $2:.1f}%')"; }
verdict() { if python3 -c "import sys; sys.exit(0 if $1 else 1)"; then echo "met   $2"; else echo "MISSED $2"; fi; }

mixed_load() {
  local d=$duration
  # A quiet instance.
  snowmint_bench --method next --concurrency 1 --connections 1 --duration "$d" >"$work/quiet.txt"
  # The bulk client, BatchIds(65536) with 16 in flight on one connection, alone and then
  # beside the NextId caller. It starts a second before the measured stretch and ends a
  # second after it: its IDs/s is what the server issued in the stretch (less the NextId
  # caller's own), without the start and the end of its run.
  local bulk before t0 after t1 next_calls bulk_alone bulk_beside
  snowmint_bench --method batch --batch-size 65536 --concurrency 16 --connections 1 --duration $((d + 2)) \
    >"$work/bulk-alone.txt" &
  bulk=$!
  sleep 1
  before=$(metric snowmint_ids_issued_total)
  t0=$(date +%s.%N)
  sleep "$d"
  t1=$(date +%s.%N)
  after=$(metric snowmint_ids_issued_total)
  wait "$bulk"
  bulk_alone=$(python3 -c "print(round(($after - $before) / ($t1 - $t0)))")
  snowmint_bench --method batch --batch-size 65536 --concurrency 16 --connections 1 --duration $((d + 2)) \
    >"$work/bulk-beside.txt" &
  bulk=$!
  sleep 1
  before=$(metric snowmint_ids_issued_total)
  t0=$(date +%s.%N)
  snowmint_bench --method next --concurrency 1 --connections 1 --duration "$d" >"$work/next-beside.txt"
  t1=$(date +%s.%N)
  after=$(metric snowmint_ids_issued_total)
  wait "$bulk"
  next_calls=$(awk '/^calls / { print $2 }' "$work/next-beside.txt")
  bulk_beside=$(python3 -c "print(round(($after - $before - $next_calls) / ($t1 - $t0)))")
  # Two bulk clients of different batch sizes, each 16 in flight on its own connection.
  snowmint_bench --method batch --batch-size 65536 --concurrency 16 --connections 1 --duration "$d" \
    >"$work/big.txt" &
  local big=$!
  snowmint_bench --method batch --batch-size 4096 --concurrency 16 --connections 1 --duration "$d" >"$work/small.txt"
  wait "$big"

  local quiet_p50 quiet_p99 quiet_max beside_p50 beside_p99 beside_max big_ids small_ids
  quiet_p50=$(latency_ms "$work/quiet.txt" p50)
  quiet_p99=$(latency_ms "$work/quiet.txt" p99)
  quiet_max=$(latency_ms "$work/quiet.txt" max)
  beside_p50=$(latency_ms "$work/next-beside.txt" p50)
  beside_p99=$(latency_ms "$work/next-beside.txt" p99)
  beside_max=$(latency_ms "$work/next-beside.txt" max)
  big_ids=$(ids_per_s "$work/big.txt")
  small_ids=$(ids_per_s "$work/small.txt")
  local ceiling=4096000 both=$((big_ids + small_ids))
  cat <<EOF

Mixed load, ${d} s each, against the ceiling of one worker (4,096,000 IDs/s), ${quantum[*]:---fair-quantum default}:

| NextId, one caller, one call at a time | p50 (ms) | p99 (ms) | max (ms) |
|---|---:|---:|---:|
| quiet instance | $quiet_p50 | $quiet_p99 | $quiet_max |
| beside BatchIds(65536), 16 in flight | $beside_p50 | $beside_p99 | $beside_max |

| bulk client | IDs/s | share |
|---|---:|---:|
| BatchIds(65536) x 16, alone | $bulk_alone | $(pct "$bulk_alone" $ceiling) of the ceiling |
| BatchIds(65536) x 16, beside the NextId caller | $bulk_beside | $(pct "$bulk_beside" $ceiling) of the ceiling |
| BatchIds(65536) x 16, beside the next one | $big_ids | $(pct "$big_ids" "$both") of both ($(pct "$both" $ceiling) of the ceiling) |
| BatchIds(4096) x 16, beside the one above | $small_ids | $(pct "$small_ids" "$both") of both |

EOF
  verdict "$beside_p99 <= 2.0 and $beside_p99 <= 5 * $quiet_p99" \
    "NextId p99 beside the bulk client <= 2 ms and <= 5x quiet ($beside_p99 ms; quiet $quiet_p99 ms)"
  verdict "$bulk_alone >= 0.98 * $ceiling" "bulk alone >= 98% of the ceiling ($(pct "$bulk_alone" $ceiling))"
  verdict "$bulk_beside >= 0.95 * $ceiling" "bulk beside NextId >= 95% of the ceiling ($(pct "$bulk_beside" $ceiling))"
  verdict "min($big_ids, $small_ids) >= 0.8 * $both / 2" \
    "two bulk clients each within 20% of an equal share ($big_ids and $small_ids IDs/s)"
  deadline_load
}

# slowest_refusal_ms FILE: the slowest refusal a `snowmint bench` report names, in ms (0 when
# none was refused).
slowest_refusal_ms() {
  python3 - "$1" <<'PY'
import re, sys
line = next((l for l in open(sys.argv[1]) if l.startswith("refused")), None)
if line is None:
    print("0")
else:
    value = re.search(r"slowest in ([0-9.]+)(ns|µs|ms|s)\)", line)
    scale = {"ns": 1e-6, "µs": 1e-3, "ms": 1.0, "s": 1e3}[value.group(2)]
    print(f"{float(value.group(1)) * scale:.3f}")
PY
}

# --- Many bulk connections with deadlines (the minter's admission): n connections of
# BatchIds(65536), one call in flight on each, every call with a deadline, beside the NextId
# caller. The bulk client starts a second before the measured stretch and ends a second after
# it. Goodput is what the server issued in the stretch (snowmint_ids_issued_total, less the
# NextId caller's own) against the ceiling; refusals are the server's counts of calls refused
# on arrival, saturated, and of calls past --max-outstanding-ids (RESOURCE_EXHAUSTED); a
# refused call pauses as the client contract does (10 ms doubling to 320 ms) and asks again.
# Late calls are the bulk client's calls that ran out their deadline.
deadline_load() {
  local d=$duration ceiling=4096000 n ms bulk t0 t1 next_calls rows="" all_ok=True
  local saturated='snowmint_refused_on_arrival_total{reason="saturated"}'
  local exhausted='snowmint_requests_total{code="ResourceExhausted",method="BatchIds",protocol="grpc"}'
  local issued0 sat0 exh0 disc0 issued1 sat1 exh1 disc1 goodput sat_s exh_s late p99 slowest discarded
  for ms in 1000 200; do
    for n in 16 64 256; do
      snowmint_bench --method batch --batch-size 65536 --concurrency "$n" --connections "$n" --deadline-ms "$ms" \
        --duration $((d + 2)) >"$work/bulk-$n-$ms.txt" &
      bulk=$!
      sleep 1
      issued0=$(metric snowmint_ids_issued_total)
      sat0=$(metric "$saturated")
      exh0=$(metric "$exhausted")
      disc0=$(metric snowmint_ids_discarded_total)
      t0=$(date +%s.%N)
      snowmint_bench --method next --concurrency 1 --connections 1 --duration "$d" >"$work/next-$n-$ms.txt" || true
      t1=$(date +%s.%N)
      issued1=$(metric snowmint_ids_issued_total)
      sat1=$(metric "$saturated")
      exh1=$(metric "$exhausted")
      disc1=$(metric snowmint_ids_discarded_total)
      # A late call fails the bulk client's run; its count is in the table.
      wait "$bulk" || true
      next_calls=$(awk '/^calls / { print $2 }' "$work/next-$n-$ms.txt")
      goodput=$(python3 -c "print(round(($issued1 - $issued0 - $next_calls) / ($t1 - $t0)))")
      sat_s=$(python3 -c "print(round(($sat1 - $sat0) / ($t1 - $t0)))")
      exh_s=$(python3 -c "print(round(($exh1 - $exh0) / ($t1 - $t0)))")
      discarded=$(python3 -c "print(round($disc1 - $disc0))")
      # "calls N in T s (E errors)": the bulk client's failed calls, each one late.
      late=$(awk '/^calls / { gsub(/\(/, "", $6); print $6 }' "$work/bulk-$n-$ms.txt")
      p99=$(latency_ms "$work/next-$n-$ms.txt" p99)
      slowest=$(slowest_refusal_ms "$work/bulk-$n-$ms.txt")
      echo "bulk $n x BatchIds(65536), $ms ms deadlines: goodput $goodput IDs/s, refused $sat_s + $exh_s /s, late $late, NextId p99 $p99 ms" >&2
      rows+="| $n | $ms ms | $goodput ($(pct "$goodput" $ceiling)) | $sat_s | $exh_s | $slowest | $discarded | $late | $p99 |"$'\n'
      all_ok+=" and $goodput >= 0.9 * $ceiling and $late == 0 and $p99 <= 2.0"
    done
  done
  cat <<EOF

Bulk connections with deadlines, BatchIds(65536), one call in flight on each connection, beside the NextId caller, ${d} s each:

| bulk connections | deadline | goodput, IDs/s (share of the ceiling) | refused on arrival, saturated (/s) | refused past --max-outstanding-ids (/s) | slowest refusal (ms) | IDs discarded | late bulk calls | NextId p99 beside (ms) |
|---:|---:|---:|---:|---:|---:|---:|---:|---:|
${rows}
EOF
  verdict "$all_ok" \
    "16, 64 and 256 bulk connections, 1 s and 200 ms deadlines: goodput >= 90% of the ceiling, no late bulk call, NextId p99 beside <= 2 ms, in every row"
}

# --- Slots: an instance holding k worker slots mints up to k x 4,096,000 IDs/s. BatchIds
# with k = 1, 4 and 8, the buffered client to one caller with k = 4 and, with --peers,
# ferroid's tonic server at 1 and 128 workers take turns in rounds, as NextId and the ticket
# servers do: each figure is the median of its rounds. Every server starts once, with the
# default worker threads, and idles while another is measured.
median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : int((v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
# run_ids FILE COMMAND...: runs a load client into FILE and prints its IDs/s. A failed run (a
# failed call, a duplicate ID) stops the script, showing the client's report.
run_ids() {
  local out=$1
  shift
  if ! "$@" >"$out"; then
    echo "failed: $*" >&2
    cat "$out" >&2
    exit 1
  fi
  ids_per_s "$out"
}
# start_ferroid WORKERS: ferroid's server on a fresh port; sets ferroid_port and ferroid_pid.
start_ferroid() {
  ferroid_port=$(free_port)
  "$ferroid_server" --num-workers "$1" --server-addr "127.0.0.1:$ferroid_port" >>"$work/ferroid.log" 2>&1 &
  ferroid_pid=$!
  pids+=("$ferroid_pid")
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$ferroid_port") 2>/dev/null && return
    sleep 0.1
  done
  echo "ferroid-tonic-server did not start; see its log:" >&2
  cat "$work/ferroid.log" >&2
  exit 1
}
# rounds_of "A B C": "A, B, C".
rounds_of() { echo "$1" | sed 's/^ //; s/ /, /g'; }

slots_load() {
  local d=$duration k w round
  local -A port pid runs rss
  for k in 1 4 8; do
    start_server --worker-id "0-$((k - 1))"
    port[$k]=$grpc_port
    pid[$k]=$server
  done
  if $peers; then
    for w in 1 128; do
      start_ferroid "$w"
      port[f$w]=$ferroid_port
      pid[f$w]=$ferroid_pid
    done
  fi
  for round in $(seq "$rounds"); do
    # BatchIds(65536), 16 in flight, 8 on each of 2 connections: the minter fills each tick
    # across the slots, and a call is waiting on every connection when a tick begins.
    for k in 1 4 8; do
      runs[$k]+=" $(run_ids "$work/slots-$k.txt" "$bin" bench --addr "http://127.0.0.1:${port[$k]}" --method batch \
        --batch-size 65536 --concurrency 16 --connections 2 --duration "$d")"
    done
    # The buffered client to one caller, refilling 65,536 IDs at a time, 4 refills at most
    # in flight (snowmint bench's buffer settings).
    runs[buffered]+=" $(run_ids "$work/slots-buffered.txt" "$bin" bench --addr "http://127.0.0.1:${port[4]}" \
      --method buffered --batch-size 65536 --concurrency 1 --duration "$d")"
    local peer_line=""
    if $peers; then
      # ferroid: StreamIds asking for 10^9 IDs each, 4 streams on each of 2 connections.
      for w in 1 128; do
        runs[f$w]+=" $(run_ids "$work/ferroid-$w.txt" "$ferroid_client" --addr "http://127.0.0.1:${port[f$w]}" \
          --connections 2 --streams 4 --duration "$d")"
      done
      peer_line=", ferroid 1 and 128 workers ${runs[f1]##* } ${runs[f128]##* }"
    fi
    echo "round $round: IDs/s, 1, 4 and 8 slots ${runs[1]##* } ${runs[4]##* } ${runs[8]##* }, buffered ${runs[buffered]##* }$peer_line" >&2
  done
  for k in "${!pid[@]}"; do
    rss[$k]=$(peak_rss_mb "${pid[$k]}")
    kill "${pid[$k]}"
    wait "${pid[$k]}" 2>/dev/null || true
  done

  local slot=4096000 k1 k4 k8 buffered f128=0
  k1=$(median ${runs[1]})
  k4=$(median ${runs[4]})
  k8=$(median ${runs[8]})
  buffered=$(median ${runs[buffered]})
  local beside=""
  if $peers; then beside=", beside ferroid's tonic server"; fi
  cat <<EOF

One instance holding k slots$beside, ${d} s each, medians of $rounds interleaved rounds:

| measurement | IDs/s | share of the ceiling | rounds | server peak RSS (MB) |
|---|---:|---:|---|---:|
| snowmint, 1 slot, BatchIds(65536), 16 in flight over 2 connections | $k1 | $(pct "$k1" $slot) of 4,096,000 | $(rounds_of "${runs[1]}") | ${rss[1]} |
| snowmint, 4 slots, the same | $k4 | $(pct "$k4" $((4 * slot))) of 16,384,000 | $(rounds_of "${runs[4]}") | ${rss[4]} |
| snowmint, 8 slots, the same | $k8 | $(pct "$k8" $((8 * slot))) of 32,768,000 | $(rounds_of "${runs[8]}") | ${rss[8]} |
| snowmint, 4 slots, buffered client to 1 caller | $buffered | $(pct "$buffered" $((4 * slot))) of 16,384,000 | $(rounds_of "${runs[buffered]}") | (the 4 slots' above) |
EOF
  if $peers; then
    local f1
    f1=$(median ${runs[f1]})
    f128=$(median ${runs[f128]})
    cat <<EOF
| ferroid, 1 worker, StreamIds, 4 streams on 2 connections | $f1 | $(pct "$f1" $slot) of 4,096,000 | $(rounds_of "${runs[f1]}") | ${rss[f1]} |
| ferroid, 128 workers, the same | $f128 | $(pct "$f128" $((128 * slot))) of 524,288,000 | $(rounds_of "${runs[f128]}") | ${rss[f128]} |
EOF
  fi
  echo
  verdict "$k8 >= 25000000" "one instance with 8 slots >= 25M IDs/s over BatchIds ($k8)"
  if $peers; then
    verdict "$k8 > $f128" "8 slots ahead of ferroid's 128 workers ($k8 vs $f128 IDs/s)"
  else
    echo "skipped 8 slots ahead of ferroid's 128 workers (measured with --peers)"
  fi
  verdict "$buffered >= 10000000" "buffered Rust client, one caller, 4 slots >= 10M IDs/s ($buffered)"
}

if $mixed_only; then
  start_server "${quantum[@]}"
  mixed_load
  exit 0
fi

if $slots_only; then
  slots_load
  exit 0
fi

# One worker thread: the load generators take the machine's other core, and Redis serves
# from one thread too. On two shared cores a second worker only adds cross-core handoffs:
# more instructions per call (scripts/measure/count-instructions.sh --worker-threads 2 counts them;
# docs/performance.md has both counts), and the system time of the wake-ups on top.
start_server --worker-threads 1

# --- NextId with 64 calls in flight, Redis INCR and PostgreSQL nextval, in interleaved
# rounds: this machine's speed drifts by 10-20% from minute to minute, so each figure is the
# median of its rounds, and each round measures all three within a few seconds.
printf '\0\0\0\0\0' >"$work/next.bin" # a gRPC frame holding an empty NextIdRequest

redis_port=$(free_port)
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --daemonize no >/dev/null &
pids+=($!)
for _ in $(seq 50); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.1; done

pg_bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
pg=false
if [ "$(id -u)" = 0 ] && id postgres >/dev/null 2>&1; then
  pg=true
  pg_port=$(free_port)
  mkdir -p "$work/pg" "$work/pg-run"
  chown postgres "$work/pg" "$work/pg-run"
  runuser -u postgres -- "$pg_bin/initdb" -D "$work/pg" -A trust -U postgres >/dev/null
  runuser -u postgres -- "$pg_bin/pg_ctl" -D "$work/pg" -l "$work/pg-run/pg.log" -w \
    -o "-p $pg_port -k $work/pg-run -c listen_addresses=127.0.0.1 -c max_connections=100" start >/dev/null
  psql -h 127.0.0.1 -p "$pg_port" -U postgres -qc 'CREATE SEQUENCE ids' >/dev/null
  echo "SELECT nextval('ids');" >"$work/nextval.sql"
fi

next_runs=()
redis_runs=()
pg_runs=()
issued=0
h2load_ok=0
for round in $(seq "$rounds"); do
  # snowmint: 4 connections x 16 streams, one h2load thread. h2load counts gRPC errors
  # (HTTP 200 with a non-zero grpc-status) as successes: count the IDs the server really
  # issued instead.
  before=$(metric snowmint_ids_issued_total)
  h2load -t 1 -c 4 -m 16 -D "$duration" --data="$work/next.bin" \
    -H 'content-type: application/grpc' -H 'te: trailers' \
    "http://127.0.0.1:$grpc_port/snowmint.v1.IdService/NextId" >"$work/h2load.txt"
  after=$(metric snowmint_ids_issued_total)
  next_runs+=("$(python3 -c "print(round(($after - $before) / $duration))")")
  issued=$((issued + after - before))
  h2load_ok=$((h2load_ok + $(awk '/^requests:/ { print $8 }' "$work/h2load.txt")))

  # Redis INCR: 64 clients, no pipelining.
  redis_runs+=("$(redis-benchmark -h 127.0.0.1 -p "$redis_port" -c 64 -P 1 -t incr -n $((duration * 60000)) --csv 2>/dev/null \
    | awk -F'"' '/INCR/ { print int($4) }')")

  # PostgreSQL sequence: pgbench, 64 clients running SELECT nextval.
  if $pg; then
    pg_runs+=("$(pgbench -h 127.0.0.1 -p "$pg_port" -U postgres -n -c 64 -j 2 -T "$duration" -f "$work/nextval.sql" postgres 2>/dev/null \
      | awk '/^tps/ { print int($3) }')")
  fi
  pg_last=skipped
  if $pg; then pg_last=${pg_runs[-1]}; fi
  echo "round $round: snowmint ${next_runs[-1]}, Redis ${redis_runs[-1]}, PostgreSQL $pg_last calls/s" >&2
done
next_rps=$(median "${next_runs[@]}")
redis_rps=$(median "${redis_runs[@]}")
pg_rps=skipped
if $pg; then pg_rps=$(median "${pg_runs[@]}"); fi

# --- p99 NextId at half the top throughput: h2load paced to half the rate over 16
# connections, one call at a time each, with every request's latency logged. (Paced with
# several streams per connection, h2load starts each connection's calls in bursts and
# measures its own queueing: about 1 ms at any rate, even a quarter of the top.)
half=$((next_rps / 2))
h2load -t 1 -c 16 -m 1 --rps=$((half / 16)) -D "$duration" --log-file="$work/half.log" --data="$work/next.bin" \
  -H 'content-type: application/grpc' -H 'te: trailers' \
  "http://127.0.0.1:$grpc_port/snowmint.v1.IdService/NextId" >"$work/h2load-half.txt"
read -r half_rps half_p99 < <(python3 - "$work/half.log" "$duration" <<'PY'
import sys
rows = [line.split("\t") for line in open(sys.argv[1]) if line.strip()]
lat = sorted(int(r[2]) for r in rows)
p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))] / 1000
print(round(len(lat) / float(sys.argv[2])), f"{p99:.3f}ms")
PY
)
rss=$(peak_rss_mb "$server")

# --- BatchIds and the buffered client need the server's whole CPU share for encoding large
# responses while the minter waits for each tick: a server with the default worker threads.
kill "$server"
wait "$server" 2>/dev/null || true
start_server

# --- BatchIds(4096), IDs/s against the ceiling of one worker.
ceiling=4096000
batch_ids=$("$bin" bench --addr "http://127.0.0.1:$grpc_port" --method batch --batch-size 4096 \
  --concurrency 4 --connections 2 --duration "$duration" | awk '/^IDs\/s/ { print $2 }')

# --- The buffered client, one caller and 64 callers.
buffered_1=$("$bin" bench --addr "http://127.0.0.1:$grpc_port" --method buffered --batch-size 4096 \
  --concurrency 1 --duration "$duration" | awk '/^IDs\/s/ { print $2 }')
buffered_64=$("$bin" bench --addr "http://127.0.0.1:$grpc_port" --method buffered --batch-size 4096 \
  --concurrency 64 --duration "$duration" | awk '/^IDs\/s/ { print $2 }')
rss=$(python3 -c "print(max($rss, $(peak_rss_mb "$server")))")

cat <<EOF

| measurement | snowmint | Redis INCR | PostgreSQL nextval |
|---|---:|---:|---:|
| one ID per call, 64 in flight (calls/s) | $next_rps | $redis_rps | $pg_rps |
| BatchIds(4096), IDs/s (share of the 4,096,000/s ceiling) | $batch_ids ($(pct "$batch_ids" $ceiling)) | | |
| buffered client, IDs/s to 1 caller | $buffered_1 | | |
| buffered client, IDs/s to 64 callers | $buffered_64 | | |
| server peak RSS (MB) | $rss | | |
| p99 NextId at half the top rate ($half_rps calls/s, h2load) | $half_p99 | | |

Medians of $rounds interleaved rounds of ${duration} s (snowmint: ${next_runs[*]}; Redis: ${redis_runs[*]}; PostgreSQL: ${pg_runs[*]:-skipped}).
Over those rounds h2load counted $h2load_ok requests as succeeded; the server issued $issued IDs.
EOF

echo
verdict "$next_rps >= 1.5 * $redis_rps" "NextId >= 1.5x Redis INCR ($next_rps vs $redis_rps calls/s, $(python3 -c "print(f'{$next_rps / $redis_rps:.2f}')")x)"
verdict "$batch_ids >= 0.95 * $ceiling" "BatchIds(4096) >= 95% of the ceiling ($(pct "$batch_ids" $ceiling))"
verdict "$buffered_1 >= 3000000" "buffered client >= 3M IDs/s to one caller ($buffered_1)"
verdict "$rss <= 50" "server RSS <= 50 MB under load ($rss MB)"
verdict "${half_p99%ms} <= 1.0" "p99 NextId <= 1 ms at half the top throughput ($half_p99)"

# --- Mixed load, on a server with the default worker threads.
kill "$server"
wait "$server" 2>/dev/null || true
start_server "${quantum[@]}"
mixed_load

# --- Slots, and with --peers ferroid.
kill "$server"
wait "$server" 2>/dev/null || true
slots_load

# --- Named sequences beside PostgreSQL's nextval and Redis INCR: a script of its own (also
# run alone), with this run's duration and rounds.
scripts/measure/bench-sequences.sh --duration "$duration" --rounds "$rounds"
