#!/bin/sh
# The Python client's checks: builds the snowmint binary the tests run (unless $SNOWMINT_BIN
# names one), makes .venv and installs the package with its dev tools when pyproject.toml
# changed, checks formatting, lint, types and the generated code, then runs pytest against
# real servers.
set -eu
cd "$(dirname "$0")"
root=$(cd ../.. && pwd)

if [ -z "${SNOWMINT_BIN:-}" ]; then
  echo "== cargo build --locked --bin snowmint"
  (cd "$root" && cargo build --locked --bin snowmint)
  SNOWMINT_BIN=$root/target/debug/snowmint
  export SNOWMINT_BIN
fi

./venv.sh

echo "== ruff, mypy"
.venv/bin/ruff format --check -q .
.venv/bin/ruff check -q .
.venv/bin/mypy
echo "== pytest"
# The tests' temp dirs under one dir of this run's, removed however the run ends (pytest's
# own base dir, /tmp/pytest-of-<user>, would keep them).
basetemp=$(mktemp -d)
trap 'rm -rf "$basetemp"' EXIT
.venv/bin/python -m pytest -q -p no:cacheprovider --basetemp "$basetemp/pytest"
