// The sequence prefetch buffer (`sequencePrefetch`) against a real snowmint process: values of
// an unordered sequence in runs of n from about one call per n, an ordered sequence never
// buffered, the last values before a maximum still handed out, concurrent callers sharing
// refills, and the option's range.
import { status as Status } from '@grpc/grpc-js';
import assert from 'node:assert/strict';
import { after, test } from 'node:test';

import { ClientClosedError, MAX_SEQUENCE_PREFETCH, RejectedError, SnowmintClient } from '../src/index.js';
import { SnowmintServer } from './server.js';

const TIMEOUT = { timeout: 60_000 };

function calls(server: SnowmintServer, method: string): Promise<number> {
  return server.metric(`snowmint_requests_total{code="OK",method="${method}",protocol="grpc"}`);
}

function assertRuns(values: bigint[]): void {
  for (let i = 1; i < values.length; i++) {
    assert.ok(values[i]! > values[i - 1]!, `not increasing: ${values.join(' ')}`);
  }
  let jumps = 0;
  for (let i = 2; i < values.length; i++) {
    jumps += values[i] === values[i - 1]! + 1n ? 0 : 1;
  }
  assert.ok(jumps <= 5, `${jumps} jumps, want runs of 10: ${values.join(' ')}`);
}

test('prefetch buffers unordered sequences only', TIMEOUT, async () => {
  const server = await SnowmintServer.startWithSequences(51, { orders: [], invoices: ['--ordered'], short: ['--max', '25'] });
  const a = new SnowmintClient([server.url], { sequencePrefetch: 10 });
  const b = new SnowmintClient([server.url], { sequencePrefetch: 10 });
  after(async () => {
    a.close();
    b.close();
    await server.close();
  });
  const fromA: bigint[] = [];
  const fromB: bigint[] = [];
  for (let i = 0; i < 50; i++) {
    fromA.push(await a.nextValue('orders'));
    fromB.push(await b.nextValue('orders'));
  }
  assertRuns(fromA);
  assertRuns(fromB);
  assert.equal(new Set([...fromA, ...fromB]).size, 100);
  assert.deepEqual([await calls(server, 'NextValue'), await calls(server, 'BatchValues')], [2, 10]);

  for (let i = 0; i < 10; i++) {
    const x = await a.nextValue('invoices');
    const y = await b.nextValue('invoices');
    const z = await a.nextValue('invoices');
    assert.ok(x < y && y < z, `${x}, ${y}, ${z}`);
  }
  assert.equal(await calls(server, 'NextValue'), 2 + 30);

  const short: bigint[] = [];
  let end: unknown;
  while (short.length <= 25) {
    try {
      short.push(await a.nextValue('short'));
    } catch (error) {
      end = error;
      break;
    }
  }
  assert.ok(end instanceof RejectedError && end.code === Status.OUT_OF_RANGE, String(end));
  assert.deepEqual(short, Array.from({ length: 25 }, (_, i) => BigInt(i + 1)));
  await assert.rejects(a.nextValue('missing'), (e: unknown) => e instanceof RejectedError && e.code === Status.NOT_FOUND);
  a.close();
  await assert.rejects(a.nextValue('orders'), ClientClosedError);
});

test('concurrent callers share refills and get distinct values', TIMEOUT, async () => {
  const server = await SnowmintServer.startWithSequences(52, { orders: [] });
  const client = new SnowmintClient([server.url], { sequencePrefetch: 100 });
  after(async () => {
    client.close();
    await server.close();
  });
  const values = await Promise.all(Array.from({ length: 500 }, () => client.nextValue('orders', { timeoutMs: 30_000 })));
  assert.equal(new Set(values).size, 500);
  const made = (await calls(server, 'NextValue')) + (await calls(server, 'BatchValues'));
  assert.ok(made <= 7, `500 values took ${made} calls`);
});

test('sequencePrefetch is checked', () => {
  for (const n of [0, MAX_SEQUENCE_PREFETCH]) {
    new SnowmintClient(['127.0.0.1:1'], { sequencePrefetch: n }).close();
  }
  for (const n of [-1, 1.5, MAX_SEQUENCE_PREFETCH + 1]) {
    assert.throws(() => new SnowmintClient(['127.0.0.1:1'], { sequencePrefetch: n }), /65536/);
  }
});
