#!/bin/sh
# The Connect protocol against the real server, with the official Connect client for Node
# (@connectrpc/connect-node, pinned in package-lock.json): builds the snowmint binary the tests
# run (unless $SNOWMINT_BIN names one), installs the locked packages when they are missing,
# builds the API's descriptor set with buf, and runs the tests with Node's test runner.
set -eu
cd "$(dirname "$0")"
root=$(cd ../.. && pwd)

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "connect tests: need Node 20 or later and npm" >&2
  exit 1
fi
if [ -z "${SNOWMINT_BIN:-}" ]; then
  echo "== cargo build --locked --bin snowmint"
  (cd "$root" && cargo build --locked --bin snowmint)
  SNOWMINT_BIN=$root/target/debug/snowmint
fi
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  echo "== connect tests: npm ci"
  npm ci --no-audit --no-fund
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$root/scripts/checks/buf" build "$root/proto" -o "$work/snowmint.binpb"
echo "== connect tests: node --test"
SNOWMINT_BIN=$SNOWMINT_BIN SNOWMINT_DESCRIPTOR=$work/snowmint.binpb npm test
