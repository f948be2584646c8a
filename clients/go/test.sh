#!/bin/sh
# The Go client's checks: builds the snowmint binary the tests run (unless $SNOWMINT_BIN names
# one), fetches the Go modules, checks formatting, vet, go.mod and the generated code, then runs
# the tests with the race detector against real servers.
set -eu
cd "$(dirname "$0")"
root=$(cd ../.. && pwd)

if [ -z "${SNOWMINT_BIN:-}" ]; then
  echo "== cargo build --locked --bin snowmint"
  (cd "$root" && cargo build --locked --bin snowmint)
  SNOWMINT_BIN=$root/target/debug/snowmint
  export SNOWMINT_BIN
else
  # gen.sh runs the protoc of the protoc-bin-vendored crate: make sure cargo has it.
  (cd "$root" && cargo fetch --locked)
fi

echo "== go mod download"
go mod download
echo "== gofmt, go vet, go mod tidy"
unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
  echo "gofmt would change: $unformatted" >&2
  exit 1
fi
go vet ./...
go mod tidy -diff
echo "== generated code is current"
./gen.sh --check
echo "== go test -race"
go test -race -count=1 -timeout 5m ./...
