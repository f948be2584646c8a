// The Connect protocol of a real snowmint server, through the official Connect client for
// Node (@connectrpc/connect-node), in JSON and binary, over HTTP/1.1 and HTTP/2; and the HTTP
// statuses of its errors, read with fetch. The servers are the real binary ($SNOWMINT_BIN) on
// free loopback ports; the service's schema is the descriptor set of proto/
// ($SNOWMINT_DESCRIPTOR, built by test.sh with buf), so nothing here is generated code.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { after, before, describe, test } from 'node:test';

import { createFileRegistry, fromBinary } from '@bufbuild/protobuf';
import { FileDescriptorSetSchema } from '@bufbuild/protobuf/wkt';
import { Code, ConnectError, createClient } from '@connectrpc/connect';
import { createConnectTransport } from '@connectrpc/connect-node';

const BIN = process.env.SNOWMINT_BIN;
const DESCRIPTOR = process.env.SNOWMINT_DESCRIPTOR;
assert.ok(BIN && DESCRIPTOR, 'run through test.sh: SNOWMINT_BIN and SNOWMINT_DESCRIPTOR name the binary and the descriptor set');

const registry = createFileRegistry(fromBinary(FileDescriptorSetSchema, readFileSync(DESCRIPTOR)));
const IdService = registry.getService('snowmint.v1.IdService');
assert.ok(IdService, 'the descriptor set has snowmint.v1.IdService');

/** Every server started, killed at the end whatever happened. */
const servers = [];
process.on('exit', () => servers.forEach((server) => server.child.kill('SIGKILL')));

/**
 * Starts `snowmint serve` with `args` on free ports (state in a fresh directory, after `prepare`
 * has written into it) and resolves once it listens: { url, admin, stop() }.
 */
async function serve(args = [], prepare = () => {}) {
  const dir = mkdtempSync(join(tmpdir(), 'snowmint-connect-'));
  prepare(dir);
  const child = spawn(
    BIN,
    ['serve', '--listen', '127.0.0.1:0', '--admin-listen', '127.0.0.1:0', '--log-format', 'json', '--state-dir', dir, ...args],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  const server = {
    child,
    async stop() {
      child.kill('SIGTERM');
      await Promise.race([
        new Promise((resolve) => child.once('exit', resolve)),
        new Promise((resolve) => setTimeout(resolve, 10_000)),
      ]);
      child.kill('SIGKILL');
      rmSync(dir, { recursive: true, force: true });
    },
  };
  servers.push(server);
  const seen = [];
  const listening = new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`snowmint did not start within 30 s:\n${seen.join('\n')}`)), 30_000);
    child.once('exit', (code) => reject(new Error(`snowmint exited (${code}):\n${seen.join('\n')}`)));
    createInterface({ input: child.stderr }).on('line', (line) => {
      seen.push(line);
      try {
        const { grpc_addr: grpc, admin_addr: admin } = JSON.parse(line);
        if (grpc && admin) {
          clearTimeout(timer);
          resolve({ grpc, admin });
        }
      } catch {
        // not a JSON line
      }
    });
  });
  const { grpc, admin } = await listening;
  return Object.assign(server, { url: `http://${grpc}`, admin: `http://${admin}` });
}

/** A state file whose reservation reaches an hour ahead: the server refuses for that hour. */
function refusingState(dir) {
  const now = Date.now();
  const until = now + 3_600_000;
  const layout = { name: 'snowmint', epoch_ms: 1767225600000, tick_ms: 1, time_bits: 41, worker_bits: 10, sequence_bits: 12, order: 'worker_sequence' };
  const state = {
    version: 1,
    worker_id: 0,
    layout,
    reserved_until_ms: until,
    reserved_until: new Date(until).toISOString(),
    saved_at: new Date(now).toISOString(),
  };
  writeFileSync(join(dir, 'worker-0.json'), JSON.stringify(state));
}

/** A metric's value from the server's admin endpoint (the series exactly as exported). */
async function metric(server, series) {
  const text = await (await fetch(`${server.admin}/metrics`, { signal: AbortSignal.timeout(10_000) })).text();
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  assert.ok(line, `no ${series} in the metrics`);
  return Number(line.slice(series.length + 1));
}

function client(server, httpVersion, useBinaryFormat) {
  return createClient(IdService, createConnectTransport({ baseUrl: server.url, httpVersion, useBinaryFormat }));
}

/** POSTs `body` to a method with fetch (HTTP/1.1): the HTTP status and the parsed body. */
async function post(server, method, body, headers = {}) {
  const response = await fetch(`${server.url}/snowmint.v1.IdService/${method}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body,
    signal: AbortSignal.timeout(10_000),
  });
  return { status: response.status, body: await response.json() };
}

/** The rejection of `promise`, which must be a ConnectError. */
async function connectError(promise) {
  const error = await promise.then(
    (value) => assert.fail(`expected an error, got ${JSON.stringify(value, (_, v) => (typeof v === 'bigint' ? `${v}` : v))}`),
    (error) => error,
  );
  assert.ok(error instanceof ConnectError, String(error));
  return error;
}

let minting;
let refusing;
let slow;

before(async () => {
  [minting, refusing, slow] = await Promise.all([
    serve(),
    serve([], refusingState),
    // Two IDs a millisecond: a batch of 1,000 takes half a second, and only one fits at once.
    serve(['--sequence-bits', '1', '--max-batch', '1000', '--max-outstanding-ids', '1000']),
  ]);
});

after(async () => {
  await Promise.all(servers.map((server) => server.stop()));
});

for (const httpVersion of ['1.1', '2']) {
  for (const useBinaryFormat of [false, true]) {
    describe(`HTTP/${httpVersion}, ${useBinaryFormat ? 'binary' : 'JSON'}`, () => {
      test('NextId, BatchIds and Decode answer', async () => {
        const ids = client(minting, httpVersion, useBinaryFormat);
        const { id } = await ids.nextId({});
        assert.equal(typeof id, 'bigint');
        const { ids: batch } = await ids.batchIds({ count: 5 });
        assert.equal(batch.length, 5);
        assert.ok(batch[0] > id, `${batch[0]} after ${id}`);
        for (let i = 1; i < batch.length; i++) assert.ok(batch[i] > batch[i - 1]);
        const decoded = await ids.decode({ id: 175928847299117063n, layout: 'discord' });
        assert.equal(decoded.unixMs, 1462015105796n);
        assert.equal(decoded.workerId, 32);
        assert.equal(decoded.sequence, 7);
        assert.equal(decoded.time, '2016-04-30T11:18:25.796Z');
      });

      test('errors come back with their codes', async () => {
        const bad = await connectError(client(minting, httpVersion, useBinaryFormat).batchIds({ count: 0 }));
        assert.equal(bad.code, Code.InvalidArgument);
        assert.match(bad.rawMessage, /count must be between 1 and 65536/);
        const refused = await connectError(client(refusing, httpVersion, useBinaryFormat).nextId({}));
        assert.equal(refused.code, Code.Unavailable);
      });
    });
  }
}

test('JSON carries 64-bit IDs as strings', async () => {
  const { status, body } = await post(minting, 'BatchIds', '{"count":3}');
  assert.equal(status, 200);
  assert.equal(body.ids.length, 3);
  for (const id of body.ids) assert.match(id, /^[0-9]+$/);
});

test('each error has the protocol\'s HTTP status', async () => {
  assert.deepEqual(await post(minting, 'BatchIds', '{"count":0}').then((r) => [r.status, r.body.code]), [400, 'invalid_argument']);
  assert.deepEqual(await post(refusing, 'NextId', '{}').then((r) => [r.status, r.body.code]), [503, 'unavailable']);
  assert.deepEqual(await post(minting, 'Mint', '{}').then((r) => [r.status, r.body.code]), [501, 'unimplemented']);
  const huge = JSON.stringify({ id: '1', layout: 'x'.repeat(100_000) });
  assert.deepEqual(await post(minting, 'Decode', huge).then((r) => [r.status, r.body.code]), [400, 'out_of_range']);
  // One batch of 1,000 at a time fits --max-outstanding-ids: the other is refused at once.
  const both = await Promise.all([post(slow, 'BatchIds', '{"count":1000}'), post(slow, 'BatchIds', '{"count":1000}')]);
  assert.deepEqual(both.map((r) => r.status).sort(), [200, 429], JSON.stringify(both.map((r) => r.body.code)));
  assert.equal(both.find((r) => r.status === 429).body.code, 'resource_exhausted');
});

test('resource_exhausted reaches the Connect client as its code', async () => {
  const ids = client(slow, '2', true);
  const results = await Promise.allSettled([ids.batchIds({ count: 1000 }), ids.batchIds({ count: 1000 })]);
  const rejected = results.filter((r) => r.status === 'rejected');
  assert.equal(rejected.length, 1, JSON.stringify(results.map((r) => r.status)));
  assert.equal(ConnectError.from(rejected[0].reason).code, Code.ResourceExhausted);
});

test('Connect-Timeout-Ms bounds a call: the server answers before the deadline', async () => {
  const refusedBefore = await metric(slow, 'snowmint_requests_total{code="Unavailable",method="BatchIds",protocol="connect"}');
  const start = Date.now();
  // 1,000 IDs take the slow server half a second: more than the 200 ms the caller allows.
  const error = await connectError(client(slow, '1.1', false).batchIds({ count: 1000 }, { timeoutMs: 200 }));
  const took = Date.now() - start;
  assert.ok([Code.Unavailable, Code.DeadlineExceeded].includes(error.code), String(error));
  assert.ok(took < 400, `the call took ${took} ms`);
  // The server answered UNAVAILABLE in time rather than leaving the call to the client's timer.
  await new Promise((resolve) => setTimeout(resolve, 300));
  assert.equal(await metric(slow, 'snowmint_requests_total{code="Unavailable",method="BatchIds",protocol="connect"}'), refusedBefore + 1);
  // A request whose body never finishes ends with deadline_exceeded at its deadline.
  const stalled = new ReadableStream({ start: (controller) => controller.enqueue(new TextEncoder().encode('{')) });
  const response = await fetch(`${slow.url}/snowmint.v1.IdService/NextId`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'connect-timeout-ms': '300' },
    body: stalled,
    duplex: 'half',
    signal: AbortSignal.timeout(10_000),
  });
  assert.equal(response.status, 504);
  assert.equal((await response.json()).code, 'deadline_exceeded');
});

test('calls are counted under protocol="connect"', async () => {
  const series = 'snowmint_requests_total{code="OK",method="NextId",protocol="connect"}';
  const before = await metric(minting, series);
  await client(minting, '2', false).nextId({});
  assert.equal(await metric(minting, series), before + 1);
  assert.equal(await metric(minting, 'snowmint_requests_total{code="OK",method="NextId",protocol="grpc"}'), 0);
});
