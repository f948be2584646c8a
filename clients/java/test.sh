#!/usr/bin/env bash
# Builds the Java client (its gRPC code generated from ../../proto at build time) and runs its
# tests, which start the real snowmint binary: $SNOWMINT_BIN, or this repository's debug build,
# built here when the variable is unset. Installs Maven when it is missing; Maven fetches the
# rest (dependencies, protoc, the gRPC plugin) from Maven Central.
set -euo pipefail
cd "$(dirname "$0")"

if ! command -v mvn >/dev/null 2>&1; then
  echo "== installing maven"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends maven >/dev/null
fi

if [ -z "${SNOWMINT_BIN:-}" ]; then
  echo "== cargo build --locked --bin snowmint"
  (cd ../.. && cargo build --locked --bin snowmint)
  SNOWMINT_BIN="$(cd ../.. && pwd)/target/debug/snowmint"
  export SNOWMINT_BIN
fi

echo "== java client: mvn test"
exec mvn -B --no-transfer-progress -Dstyle.color=never test
