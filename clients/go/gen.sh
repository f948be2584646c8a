#!/bin/sh
# Generates the Go code for proto/snowmint/v1/snowmint.proto into internal/snowmintv1, with
# protoc-gen-go and protoc-gen-go-grpc at the versions pinned below (installed into .bin from
# the Go module proxy when missing) and the protoc that tools/protoc runs.
#
#   ./gen.sh          regenerate the committed files
#   ./gen.sh --check  fail if the committed files differ from a fresh generation
set -eu
cd "$(dirname "$0")"
root=$(cd ../.. && pwd)

PROTOC_GEN_GO=v1.36.12
PROTOC_GEN_GO_GRPC=v1.6.2
module=github.com/snowmint/snowmint/clients/go
proto=snowmint/v1/snowmint.proto
package=$module/internal/snowmintv1

bin=$PWD/.bin
install_tool() { # NAME PACKAGE VERSION
  have=$("$bin/$1" --version 2>/dev/null | awk '{print $NF}') || have=
  if [ "${have#v}" != "${3#v}" ]; then
    echo "gen.sh: installing $2@$3" >&2
    GOBIN=$bin go install "$2@$3"
  fi
}
install_tool protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go "$PROTOC_GEN_GO"
install_tool protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc "$PROTOC_GEN_GO_GRPC"

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"${PROTOC:-$root/tools/protoc}" -I "$root/proto" \
  --plugin=protoc-gen-go="$bin/protoc-gen-go" --plugin=protoc-gen-go-grpc="$bin/protoc-gen-go-grpc" \
  --go_out="$out" --go_opt=module=$module --go_opt=M$proto=$package \
  --go-grpc_out="$out" --go-grpc_opt=module=$module --go-grpc_opt=M$proto=$package \
  "$proto"

if [ "${1:-}" = --check ]; then
  if ! diff -ru internal/snowmintv1 "$out/internal/snowmintv1"; then
    echo "gen.sh: internal/snowmintv1 is not what proto/$proto generates; run clients/go/gen.sh" >&2
    exit 1
  fi
else
  rm -rf internal/snowmintv1
  mkdir -p internal
  cp -r "$out/internal/snowmintv1" internal/
fi
