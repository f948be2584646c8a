#!/usr/bin/env bash
# Each client installed the normal way of its ecosystem, from the artifact its tools pack, into a
# fresh project that then calls a real server (issue 30):
#
#   rust        `cargo package` -> the .crate unpacked as a path dependency (its proto inside)
#   go          a module zip of the tracked files, served by a file:// GOPROXY, `go get`
#   java        `mvn package` -> deployed to a file repository, resolved by a fresh pom that
#               also brings protobuf-java 4.x (the client declares none of its own)
#   python      `pip wheel` -> installed in a fresh venv with the oldest grpcio it allows
#   typescript  `npm pack` -> installed, then imported as ESM and required as CommonJS, and
#               type-checked with its exported option types; nothing in it reads a file
#
# Also: each artifact names Apache-2.0 and carries the repository's LICENSE. The server binary is
# $SNOWMINT_BIN, or this checkout's debug build. Everything it makes goes with its temp dir.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
target=${CARGO_TARGET_DIR:-$root/target}
bin=${SNOWMINT_BIN:-$target/debug/snowmint}
only=${1:-rust,go,java,python,typescript}

work=$(mktemp -d)
server=
m2_before=$([ -d "$HOME/.m2/repository/dev/snowmint" ] && echo yes || echo no)
cleanup() {
  [ -n "$server" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
  # The snapshot the fresh Java project resolved lands in the local Maven repository too.
  [ "$m2_before" = no ] && rm -rf "$HOME/.m2/repository/dev/snowmint"
  rm -rf "$work"
}
trap cleanup EXIT

"$bin" serve --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 --state-dir "$work/state" --worker-id 77 \
  --log-format json 2>"$work/server.log" &
server=$!
addr=
for _ in $(seq 100); do
  addr=$(grep -o '"grpc_addr":"[^"]*"' "$work/server.log" | head -1 | cut -d'"' -f4) || true
  [ -n "$addr" ] && break
  kill -0 "$server" 2>/dev/null || { cat "$work/server.log" >&2; exit 1; }
  sleep 0.1
done
[ -n "$addr" ] || { echo "packages.sh: the server did not start" >&2; exit 1; }
export SNOWMINT_ENDPOINTS=$addr

# expect OUTPUT: the fresh project printed an ID of worker 77 and a batch of 3.
expect() {
  grep -q '^worker 77, batch of 3$' <<<"$1" || { echo "unexpected output: $1" >&2; exit 1; }
}
same_license() {
  cmp -s "$1" "$root/LICENSE" || { echo "$1 is not the repository's LICENSE" >&2; exit 1; }
}
wants() { [[ ",$only," == *",$1,"* ]]; }
# quiet COMMAND...: runs it, showing its output only when it fails.
quiet() {
  local out
  if ! out=$("$@" 2>&1); then
    echo "$out" >&2
    echo "failed: $*" >&2
    return 1
  fi
}

if wants rust; then
  echo "== rust: cargo package, a fresh project"
  cargo package -q --locked -p snowmint-client --allow-dirty --no-verify
  mkdir "$work/rust" && tar xzf "$target/package/snowmint-client-0.1.0.crate" -C "$work/rust"
  crate=$work/rust/snowmint-client-0.1.0
  grep -q '^license = "Apache-2.0"$' "$crate/Cargo.toml" && same_license "$crate/LICENSE"
  mkdir -p "$work/rust/fresh/src"
  cat >"$work/rust/fresh/Cargo.toml" <<TOML
[package]
name = "fresh"
version = "0.1.0"
edition = "2024"

[dependencies]
snowmint-client = { path = "$crate" }
tokio = { version = "1", features = ["rt-multi-thread", "macros"] }

[workspace]
TOML
  cat >"$work/rust/fresh/src/main.rs" <<'RUST'
use snowmint_client::{Client, Layout};

#[tokio::main]
async fn main() -> Result<(), snowmint_client::ClientError> {
    let client = Client::builder([std::env::var("SNOWMINT_ENDPOINTS").unwrap()]).connect()?;
    let id = client.next_id().await?;
    let batch = client.batch(3).await?;
    let worker = Layout::default_snowmint().decode(id).unwrap().worker_id;
    println!("worker {worker}, batch of {}", batch.len());
    client.close();
    Ok(())
}
RUST
  # The workspace's lock and target: the same dependency versions, built once.
  cp "$root/Cargo.lock" "$work/rust/fresh/Cargo.lock"
  expect "$(cd "$work/rust/fresh" && CARGO_TARGET_DIR=$target cargo run -q --offline)"
fi

if wants go; then
  echo "== go: a module zip, go get from a file:// proxy"
  module=github.com/snowmint/snowmint/clients/go
  version=v0.1.0
  proxy=$work/go/proxy/$module/@v
  mkdir -p "$proxy"
  # The module zip of the tracked files, with the repository's LICENSE at the module's root,
  # as the go command packs a module in a subdirectory of its repository.
  git ls-files clients/go | python3 -c '
import sys, zipfile
module, version, out, root = sys.argv[1:]
with zipfile.ZipFile(out, "w") as z:
    for path in sys.stdin.read().split():
        z.write(f"{root}/{path}", f"{module}@{version}/" + path.removeprefix("clients/go/"))
    z.write(f"{root}/LICENSE", f"{module}@{version}/LICENSE")
' "$module" "$version" "$proxy/$version.zip" "$root"
  cp clients/go/go.mod "$proxy/$version.mod"
  echo "$version" >"$proxy/list"
  echo "{\"Version\":\"$version\",\"Time\":\"2026-01-01T00:00:00Z\"}" >"$proxy/$version.info"
  mkdir -p "$work/go/fresh"
  cat >"$work/go/fresh/main.go" <<'GO'
package main

import (
	"context"
	"fmt"
	"log"
	"os"

	snowmint "github.com/snowmint/snowmint/clients/go"
)

func main() {
	ctx := context.Background()
	client, err := snowmint.New(ctx, []string{os.Getenv("SNOWMINT_ENDPOINTS")})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	id, err := client.NextID(ctx)
	if err != nil {
		log.Fatal(err)
	}
	batch, err := client.Batch(ctx, 3)
	if err != nil {
		log.Fatal(err)
	}
	d, err := snowmint.Decode(id, snowmint.DefaultLayout())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("worker %d, batch of %d\n", d.WorkerID, len(batch))
}
GO
  (
    cd "$work/go/fresh"
    export GOPROXY="file://$work/go/proxy,https://proxy.golang.org" GOSUMDB=off GOFLAGS=-mod=mod
    quiet go mod init example.com/fresh
    quiet go get "$module@$version"
    quiet go mod tidy
    expect "$(go run .)"
  )
fi

if wants java; then
  echo "== java: mvn package, a fresh project from a file repository, with protobuf-java 4"
  (cd clients/java && quiet mvn -B -q --no-transfer-progress -Dstyle.color=never package -DskipTests \
    deploy:deploy-file -Dfile=target/snowmint-client-0.1.0-SNAPSHOT.jar -DpomFile=pom.xml \
    -Durl="file://$work/java/repo" -DrepositoryId=packed)
  unzip -p "$work"/java/repo/dev/snowmint/snowmint-client/0.1.0-SNAPSHOT/snowmint-client-*.jar META-INF/LICENSE \
    >"$work/java/LICENSE" && same_license "$work/java/LICENSE"
  grep -q '<name>Apache-2.0</name>' "$work"/java/repo/dev/snowmint/snowmint-client/0.1.0-SNAPSHOT/*.pom
  mkdir -p "$work/java/fresh/src/main/java"
  cat >"$work/java/fresh/pom.xml" <<XML
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>example</groupId>
  <artifactId>fresh</artifactId>
  <version>1</version>
  <properties><maven.compiler.release>17</maven.compiler.release></properties>
  <repositories>
    <repository><id>packed</id><url>file://$work/java/repo</url></repository>
  </repositories>
  <dependencies>
    <dependency>
      <groupId>dev.snowmint</groupId>
      <artifactId>snowmint-client</artifactId>
      <version>0.1.0-SNAPSHOT</version>
    </dependency>
    <dependency>
      <groupId>com.google.protobuf</groupId>
      <artifactId>protobuf-java</artifactId>
      <version>4.33.5</version>
    </dependency>
  </dependencies>
</project>
XML
  cat >"$work/java/fresh/Main.java" <<'JAVA'
import dev.snowmint.client.Layout;
import dev.snowmint.client.SnowmintClient;
import java.time.Duration;

public class Main {
    public static void main(String[] args) {
        // A cold JVM on a busy machine can take more than the default second to open its first
        // connection (class loading, Netty): this checks the package, not that.
        try (SnowmintClient client = SnowmintClient.builder(System.getenv("SNOWMINT_ENDPOINTS"))
                .timeout(Duration.ofSeconds(10))
                .build()) {
            long id = client.nextId();
            long[] batch = client.batch(3);
            System.out.println("worker " + Layout.snowmint().decode(id).workerId() + ", batch of " + batch.length);
        }
    }
}
JAVA
  (
    cd "$work/java/fresh"
    quiet mvn -B -q -U --no-transfer-progress -Dstyle.color=never dependency:build-classpath -Dmdep.outputFile=cp.txt
    grep -q 'protobuf-java-4.33.5.jar' cp.txt || { echo "the fresh project does not run on protobuf-java 4.33.5" >&2; exit 1; }
    javac -d classes -cp "$(cat cp.txt)" Main.java
    expect "$(java -cp "classes:$(cat cp.txt)" Main)"
  )
fi

if wants python; then
  echo "== python: pip wheel, a fresh venv with the oldest grpcio allowed"
  # Built from a copy of the tracked files (links resolved), so the build leaves nothing in the tree.
  mkdir -p "$work/python/src"
  git ls-files -z clients/python | tar --null -T - -chf - | tar -xf - -C "$work/python/src"
  quiet python3 -m pip wheel -q --no-deps -w "$work/python/dist" "$work/python/src/clients/python"
  wheel=$(ls "$work"/python/dist/snowmint_client-*.whl)
  python3 -m venv "$work/python/venv"
  minimum=$(grep -o '"grpcio>=[0-9.]*"' clients/python/pyproject.toml | tr -d '"' | cut -d'=' -f2)
  quiet "$work/python/venv/bin/python" -m pip install -q "$wheel" "grpcio==$minimum.*"
  cat >"$work/python/fresh.py" <<'PY'
import asyncio, os, sys
from importlib.metadata import files, metadata

import grpc
from snowmint_client import AsyncClient, Client, decode

meta = metadata("snowmint-client")
assert meta["License-Expression"] == "Apache-2.0", meta["License-Expression"]
assert not any("protobuf" in r for r in meta.get_all("Requires-Dist")), meta.get_all("Requires-Dist")
license = next(f for f in files("snowmint-client") if f.name == "LICENSE")
assert license.read_text() == open(sys.argv[1]).read(), "the wheel's LICENSE is not the repository's"
endpoints = [os.environ["SNOWMINT_ENDPOINTS"]]
print(f"grpcio {grpc.__version__}", file=sys.stderr)
with Client(endpoints) as client:
    worker, batch = decode(client.next_id()).worker_id, client.batch(3)

async def run() -> None:
    async with AsyncClient(endpoints) as client:
        assert decode(await client.next_id()).worker_id == worker and len(await client.batch(3)) == 3

asyncio.run(run())
print(f"worker {worker}, batch of {len(batch)}")
PY
  expect "$("$work/python/venv/bin/python" "$work/python/fresh.py" "$root/LICENSE")"
fi

if wants typescript; then
  echo "== typescript: npm pack, installed, imported as ESM and CommonJS, type-checked"
  (cd clients/typescript && npm pack -q --pack-destination "$work" >/dev/null)
  tarball=$(ls "$work"/snowmint-client-*.tgz)
  mkdir -p "$work/ts/fresh" && cd "$work/ts/fresh"
  npm init -y >/dev/null
  quiet npm install --no-audit --no-fund "$tarball"
  package=node_modules/@snowmint/client
  same_license "$package/LICENSE"
  node -e 'const p = require("./node_modules/@snowmint/client/package.json"); if (p.license !== "Apache-2.0") throw p.license'
  # Nothing in the package reads a file: no .proto shipped, no fs module imported.
  if find "$package" -name '*.proto' | grep -q . || grep -rlE "node:fs|require\\(.fs.\\)|from .fs." "$package/dist"; then
    echo "the package reads files at run time" >&2
    exit 1
  fi
  cat >esm.mjs <<'JS'
import { SnowmintClient, decode } from '@snowmint/client';
const client = new SnowmintClient([process.env.SNOWMINT_ENDPOINTS], { buffer: true });
try {
  const { workerId } = decode(await client.nextId());
  console.log(`worker ${workerId}, batch of ${(await client.batch(3)).length}`);
} finally {
  client.close();
}
JS
  cat >cjs.cjs <<'JS'
const { SnowmintClient, decode } = require('@snowmint/client');
const client = new SnowmintClient([process.env.SNOWMINT_ENDPOINTS]);
(async () => {
  const { workerId } = decode(await client.nextId());
  console.log(`worker ${workerId}, batch of ${(await client.batch(3)).length}`);
})().finally(() => client.close());
JS
  expect "$(node esm.mjs)"
  expect "$(node cjs.cjs)"
  cat >types.mts <<'TS'
import { SnowmintClient, type BufferOptions, type CallOptions, type ClientOptions, type TlsOptions } from '@snowmint/client';
const buffer: BufferOptions = { batch: 100, maxAgeMs: 500 };
const tls: TlsOptions = { ca: '-----BEGIN CERTIFICATE-----' };
const options: ClientOptions = { timeoutMs: 500, buffer, tls };
const call: CallOptions = { timeoutMs: 100 };
export const id: Promise<bigint> = new SnowmintClient(['127.0.0.1:1'], options).nextId(call);
TS
  cat >types.cts <<'TS'
import { SnowmintClient, type ClientOptions } from '@snowmint/client';
const options: ClientOptions = { attempts: 3 };
export const client = new SnowmintClient('127.0.0.1:1', options);
TS
  tsc=$root/clients/typescript/node_modules/.bin/tsc
  "$tsc" --noEmit --strict --module nodenext --moduleResolution nodenext --types node \
    --typeRoots "$root/clients/typescript/node_modules/@types" types.mts types.cts
fi
echo "== every package installed from its artifact and called the server"
