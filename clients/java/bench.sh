#!/usr/bin/env bash
# IDs/s to one caller with the buffer, against a running server:
#   clients/java/bench.sh --addr http://127.0.0.1:50051 --duration 5
set -euo pipefail
cd "$(dirname "$0")"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! mvn -B -q --no-transfer-progress -Dstyle.color=never test-compile dependency:build-classpath \
  -Dmdep.outputFile=target/classpath.txt -Dmdep.includeScope=test >"$log" 2>&1; then
  cat "$log" >&2
  exit 1
fi
java -cp "target/classes:target/test-classes:$(cat target/classpath.txt)" dev.snowmint.client.Bench "$@"
