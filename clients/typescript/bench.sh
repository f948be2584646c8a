#!/usr/bin/env bash
# IDs/s to one caller with the buffer, against a running server:
#   clients/typescript/bench.sh --addr http://127.0.0.1:50051 --duration 5
set -euo pipefail
cd "$(dirname "$0")"
if [ ! -f node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund
fi
npm run --silent build
exec node dist/bench/bench.js "$@"
