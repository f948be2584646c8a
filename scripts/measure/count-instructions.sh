#!/usr/bin/env bash
# Instructions the server executes per NextId call (or per call of --call, NextUuid say),
# counted by callgrind: unlike a timing,
# the count does not drift with the machine, so it shows what a change to the call path
# gains. The server runs under valgrind with --worker-threads 1 unless the flags given name
# another count; h2load makes 2,000 calls to warm it, the counters are zeroed, and 20,000
# calls at 64 in flight are counted. Only user-space instructions count: system time (the
# wake-ups of handing work between threads, say) is not in the figure.
#
#   scripts/measure/count-instructions.sh [--dry-run] [--call NextId|NextUuid] [serve flags...]
#                                                           e.g. --worker-threads 2
#
# --dry-run prints the serve flags the count would run with, and stops.
#
# Needs valgrind and h2load (Debian's valgrind and nghttp2-client), installed when missing.
set -euo pipefail
cd "$(dirname "$0")/../.."
dry_run=false
if [ "${1:-}" = --dry-run ]; then
  dry_run=true
  shift
fi

# The call counted: one whose request is the empty message, as NextId's and NextUuid's are.
call=NextId
if [ "${1:-}" = --call ]; then
  call=$2
  shift 2
fi
case "$call" in
  NextId | NextUuid) ;;
  *) echo "--call is NextId or NextUuid, not $call" >&2; exit 2 ;;
esac

# One worker thread unless the flags say otherwise: serve takes each flag once.
threads=(--worker-threads 1)
for arg in "$@"; do
  case "$arg" in
    --worker-threads | --worker-threads=*) threads=() ;;
  esac
done
serve_flags=(${threads[@]+"${threads[@]}"} "$@")
if $dry_run; then
  echo "${serve_flags[*]}"
  exit 0
fi

# Debian's valgrind and nghttp2-client, installed when missing (as scripts/check installs what
# the tests need).
if ! command -v valgrind >/dev/null || ! command -v callgrind_control >/dev/null || ! command -v h2load >/dev/null; then
  echo "== installing valgrind and nghttp2-client (for callgrind and h2load)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends valgrind nghttp2-client >/dev/null
fi
cargo build --release --locked -q

work=$(mktemp -d)
server=
cleanup() {
  if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
valgrind --tool=callgrind --callgrind-out-file="$work/callgrind.%p" target/release/snowmint serve \
  --state-dir "$work/state" --listen "127.0.0.1:$port" --admin-listen 127.0.0.1:0 "${serve_flags[@]}" \
  2>"$work/serve.log" &
server=$!
printf '\0\0\0\0\0' >"$work/next.bin" # a gRPC frame holding an empty request message
calls() {
  h2load -t 1 -c 4 -m 16 -n "$1" --data="$work/next.bin" -H 'content-type: application/grpc' -H 'te: trailers' \
    "http://127.0.0.1:$port/snowmint.v1.IdService/$call" | awk '/^requests:/ { print $8 }'
}
for _ in $(seq 300); do
  [ "$(calls 10 2>/dev/null || true)" = 10 ] && break
  sleep 0.2
done
[ "$(calls 2000)" = 2000 ] || { echo "the warm-up calls failed; see $work/serve.log" >&2; exit 1; }
callgrind_control --zero "$server" >/dev/null 2>&1
[ "$(calls 20000)" = 20000 ] || { echo "some counted calls failed" >&2; exit 1; }
callgrind_control --dump "$server" >/dev/null 2>&1
sleep 1
total=$(awk '/^(summary|totals):/ { print $2; exit }' "$(ls "$work"/callgrind.*.1 | head -n 1)")
echo "$((total / 20000)) instructions per $call call (over 20,000 calls; serve ${serve_flags[*]})"
