#!/usr/bin/env bash
# Builds the TypeScript client (the proto copied in from ../../proto, then tsc) and runs its
# tests with Node's test runner; they start the real snowmint binary: $SNOWMINT_BIN, or this
# repository's debug build, built here when the variable is unset. Installs the locked
# dependencies (npm ci) when they are missing or older than the lock file.
set -euo pipefail
cd "$(dirname "$0")"

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "typescript client: needs Node 20 or later and npm" >&2
  exit 1
fi

if [ -z "${SNOWMINT_BIN:-}" ]; then
  echo "== cargo build --locked --bin snowmint"
  (cd ../.. && cargo build --locked --bin snowmint)
  SNOWMINT_BIN="$(cd ../.. && pwd)/target/debug/snowmint"
  export SNOWMINT_BIN
fi

if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  echo "== typescript client: npm ci"
  npm ci --no-audit --no-fund
fi

echo "== typescript client: build and test"
npm test
