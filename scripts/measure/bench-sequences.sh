#!/usr/bin/env bash
# Named sequences beside IDs, and beside the two ticket servers teams run instead: a
# PostgreSQL sequence (nextval) and Redis INCR, in interleaved rounds on loopback (the table
# shows each figure's median), every client at the same concurrency:
#
#   - one value a call: snowmint NextValue and NextId (snowmint bench), PostgreSQL
#     `SELECT nextval('s')` (pgbench), Redis `INCR` (redis-benchmark), 64 in flight;
#   - batches of 4096: snowmint BatchValues and BatchIds, PostgreSQL
#     `SELECT nextval('s') FROM generate_series(1, 4096)`, Redis `INCRBY s 4096` (a range
#     of 4096 values in one answer), 16 in flight; values per second.
#
# The targets (issue 27): BatchValues at 4,000,000 values/s or more from one instance, and
# NextValue on par with NextId (within 10%). snowmint's runs check that every value they
# received is unique (snowmint bench fails otherwise). PostgreSQL runs with its defaults
# (fsync on; nextval itself is not WAL-flushed per call) and Redis with Debian's (snapshots,
# no append-only file): neither is the durability a segment's write-ahead claim gives.
# Installs postgresql and redis-server from Debian when missing.
#
#   scripts/measure/bench-sequences.sh [--duration SECONDS] [--rounds N]
set -euo pipefail
cd "$(dirname "$0")/../.."

. scripts/measure/lib.sh
measure_args "$@"

ensure_apt() { # COMMAND PACKAGE
  if ! command -v "$1" >/dev/null 2>&1 && [ ! -x "$1" ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$2" >/dev/null
  fi
}
ensure_apt redis-server redis-server
ensure_apt redis-benchmark redis-tools
ensure_apt "$(compgen -G '/usr/lib/postgresql/*/bin/initdb' | sort -V | tail -n 1 || echo '/usr/lib/postgresql/*/bin/initdb')" postgresql
pgbin=$(dirname "$(compgen -G '/usr/lib/postgresql/*/bin/initdb' | sort -V | tail -n 1)")

cargo build --release --locked -q
bin=target/release/snowmint
work=$(mktemp -d)
chmod 755 "$work"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT


# snowmint, standalone, making the sequence on its first call.
grpc_port=$(free_port)
admin_port=$(free_port)
"$bin" serve --listen "127.0.0.1:$grpc_port" --admin-listen "127.0.0.1:$admin_port" \
  --state-dir "$work/state" --create-sequences-on-use --log-format json 2>>"$work/snowmint.log" &
pids+=($!)
for _ in $(seq 100); do
  "$bin" next --addr "http://127.0.0.1:$grpc_port" >/dev/null 2>&1 && break
  sleep 0.1
done

# PostgreSQL as an unprivileged user (it refuses root), on a free port, its socket in $work.
as_pg=()
if [ "$(id -u)" = 0 ]; then as_pg=(runuser -u postgres --); fi
pg_port=$(free_port)
mkdir -m 700 "$work/pg"
[ "$(id -u)" = 0 ] && chown postgres "$work/pg"
"${as_pg[@]}" "$pgbin/initdb" -D "$work/pg/data" -U postgres -A trust >/dev/null
"${as_pg[@]}" "$pgbin/postgres" -D "$work/pg/data" -p "$pg_port" -k "$work/pg" -c listen_addresses=127.0.0.1 \
  -c max_connections=200 >"$work/pg.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  "$pgbin/pg_isready" -h 127.0.0.1 -p "$pg_port" -q && break
  sleep 0.1
done
psql() { "$pgbin/psql" -h 127.0.0.1 -p "$pg_port" -U postgres -q "$@"; }
psql -c 'CREATE SEQUENCE s'
echo "SELECT nextval('s');" >"$work/one.sql"
echo "SELECT nextval('s') FROM generate_series(1, 4096);" >"$work/batch.sql"

# Redis with Debian's defaults, on a free port.
redis_port=$(free_port)
redis-server --port "$redis_port" --bind 127.0.0.1 --dir "$work" --daemonize no >"$work/redis.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break
  sleep 0.1
done

bench() { "$bin" bench --addr "http://127.0.0.1:$grpc_port" --duration "$duration" "$@"; }
pgbench_tps() { # SCRIPT CLIENTS
  "$pgbin/pgbench" -h 127.0.0.1 -p "$pg_port" -U postgres -n -c "$2" -j 2 -T "$duration" -f "$1" postgres 2>/dev/null |
    awk '/^tps = / { print $3 }'
}
redis_rps() { # CLIENTS COMMAND...
  local clients=$1
  shift
  # --csv: "name","rps",...; the last line is the command's.
  redis-benchmark -p "$redis_port" -c "$clients" -n $((duration * 100000)) --csv "$@" 2>/dev/null |
    tail -n 1 | cut -d, -f2 | tr -d '"'
}

declare -A runs
for round in $(seq "$rounds"); do
  for method in next next-value; do
    bench --method "$method" --concurrency 64 --connections 4 >"$work/$method.txt"
    runs[$method]+=" $(field calls/s "$work/$method.txt")"
    runs[$method-p99]+=" $(python3 scripts/measure/latency_ms.py "$work/$method.txt" p99)"
  done
  runs[pg-one]+=" $(pgbench_tps "$work/one.sql" 64)"
  runs[redis-one]+=" $(redis_rps 64 INCR s)"
  bench --method batch --batch-size 4096 --concurrency 16 --connections 4 >"$work/batch.txt"
  runs[batch]+=" $(field IDs/s "$work/batch.txt")"
  bench --method batch-values --batch-size 4096 --concurrency 16 --connections 4 >"$work/batch-values.txt"
  runs[batch-values]+=" $(field IDs/s "$work/batch-values.txt")"
  runs[pg-batch]+=" $(python3 -c "print($(pgbench_tps "$work/batch.sql" 16) * 4096)")"
  runs[redis-batch]+=" $(python3 -c "print($(redis_rps 16 INCRBY s 4096) * 4096)")"
  echo "round $round of $rounds done" >&2
done

# What the store saw: segments claimed for the run's values (one compare-and-set each).
metrics=$(curl -s "http://127.0.0.1:$admin_port/metrics")
metric() { printf '%s\n' "$metrics" | awk -v s="$1" 'index($0, s) == 1 { print $2 }'; }
issued=$(metric 'snowmint_named_sequence_values_issued_total{sequence="bench"}')
claimed=$(metric 'snowmint_named_sequence_segments_total{result="claimed",sequence="bench"}')
last_size=$(metric 'snowmint_named_sequence_segment_size{sequence="bench"}')

m() { median ${runs[$1]}; }
n() { python3 -c "print(f'{round($1):,}')"; }
cat <<TABLE
Named sequences beside IDs and the ticket servers, loopback, ${duration} s each, medians of $rounds interleaved rounds:

| one value a call, 64 in flight | per second | p99 |
|---|---:|---:|
| snowmint \`NextId\` | $(n "$(m next)") | $(m next-p99) ms |
| snowmint \`NextValue\` | $(n "$(m next-value)") | $(m next-value-p99) ms |
| PostgreSQL \`nextval\` (pgbench) | $(n "$(m pg-one)") | |
| Redis \`INCR\` (redis-benchmark) | $(n "$(m redis-one)") | |

| batches of 4096, 16 in flight | values per second |
|---|---:|
| snowmint \`BatchIds(4096)\` | $(n "$(m batch)") |
| snowmint \`BatchValues(4096)\` | $(n "$(m batch-values)") |
| PostgreSQL \`nextval\` × 4096 in one statement | $(n "$(m pg-batch)") |
| Redis \`INCRBY 4096\` (a range) | $(n "$(m redis-batch)") |

snowmint's store writes for the sequence: $(n "$claimed") segments for $(n "$issued") values (one
compare-and-set each), the last of $(n "$last_size") values.
TABLE
python3 - "$(m next-value)" "$(m next)" "$(m batch-values)" <<'PY'
import sys
value_rps, next_rps, values = map(float, sys.argv[1:])
print(("met   " if value_rps >= 0.9 * next_rps else "MISSED ") + "NextValue within 10% of NextId")
print(("met   " if values >= 4_000_000 else "MISSED ") + "BatchValues at 4,000,000 values/s or more")
PY
