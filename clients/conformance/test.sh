#!/usr/bin/env bash
# The conformance suite: builds each client's driver (Rust, Go, Java, Python, TypeScript),
# checks the suite's own code, then runs every scenario for every client against real
# servers (run.py; its flags pass through, e.g. --clients go,java --scenarios hung,close, or
# --rolling-down-seconds 5 --paced-seconds 10 for a quick look; the defaults are the
# contract's own figures). The server binary is $SNOWMINT_BIN, or this checkout's debug
# build, built here when the variable is unset.
set -euo pipefail
cd "$(dirname "$0")"
root=$(cd ../.. && pwd)

if [ -z "${SNOWMINT_BIN:-}" ]; then
  echo "== cargo build --locked --bin snowmint"
  (cd "$root" && cargo build --locked --bin snowmint)
  SNOWMINT_BIN=${CARGO_TARGET_DIR:-$root/target}/debug/snowmint
  export SNOWMINT_BIN
fi

echo "== drivers: rust (clippy, build)"
(cd "$root" && cargo clippy --locked -q -p snowmint-client --features tls --all-targets -- -D warnings &&
  cargo build --locked -q -p snowmint-client --features tls --example conformance)
echo "== drivers: go"
(cd ../go && go build -o .bin/conformance ./cmd/conformance)
echo "== drivers: java"
(cd ../java && mvn -B -q --no-transfer-progress -Dstyle.color=never test-compile dependency:build-classpath \
  -Dmdep.outputFile=target/classpath.txt -Dmdep.includeScope=test)
echo "== drivers: python"
../python/venv.sh
echo "== drivers: typescript"
(cd ../typescript &&
  if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
    npm ci --no-audit --no-fund
  fi &&
  npm run --silent build)

echo "== the suite: ruff, mypy"
../python/.venv/bin/ruff format --check -q .
../python/.venv/bin/ruff check -q .
../python/.venv/bin/mypy --no-error-summary
echo "== the suite"
exec python3 run.py "$@"
