# What the short benchmark scripts (bench-tenants.sh, bench-uuids.sh, bench-sequences.sh)
# share; sourced, not run.
#
#   measure_args "$@"   sets duration (seconds a run, 5) and rounds (3) from --duration
#                       SECONDS and --rounds N; anything else prints the script's usage
#   free_port           a free loopback TCP port
#   field NAME FILE     the value of `NAME value` in a `snowmint bench` report
#   median VALUES...    their median

measure_args() {
  duration=5
  rounds=3
  while [ $# -gt 0 ]; do
    case "$1" in
      --duration) duration=$2; shift 2 ;;
      --rounds) rounds=$2; shift 2 ;;
      *) echo "usage: ${0#./} [--duration SECONDS] [--rounds N]" >&2; exit 2 ;;
    esac
  done
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
field() { awk -v f="$1" '$1 == f { print $2 }' "$2"; }
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
