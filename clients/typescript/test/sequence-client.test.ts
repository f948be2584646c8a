// nextValue() and batchValues() of named sequences against real snowmint processes, and their
// messages on the wire.
import { status as Status } from '@grpc/grpc-js';
import assert from 'node:assert/strict';
import { after, test } from 'node:test';

import { RejectedError, SnowmintClient } from '../src/index.js';
import { batchValuesRequest, batchValuesResponse, nextValueRequest, nextValueResponse } from '../src/wire.js';
import { SnowmintServer } from './server.js';

const TIMEOUT = { timeout: 60_000 };

test('values come dense from a server creating sequences, and a missing one is NOT_FOUND', TIMEOUT, async () => {
  const creating = await SnowmintServer.start(41, '--create-sequences-on-use');
  const strict = await SnowmintServer.start(42);
  const client = new SnowmintClient([creating.url]);
  const other = new SnowmintClient([strict.url]);
  after(async () => {
    client.close();
    other.close();
    await Promise.all([creating.close(), strict.close()]);
  });
  assert.equal(await client.nextValue('orders'), 1n);
  assert.deepEqual(await client.batchValues('orders', 5), [2n, 3n, 4n, 5n, 6n]);
  assert.equal(await client.nextValue('orders', { timeoutMs: 5_000 }), 7n);
  const many = await client.batchValues('orders', 1_000);
  assert.equal(many.length, 1_000);
  assert.equal(many[0], 8n);
  await assert.rejects(other.nextValue('orders'), (e: unknown) => e instanceof RejectedError && e.code === Status.NOT_FOUND);
  await assert.rejects(client.batchValues('orders', 0), (e: unknown) => e instanceof RejectedError && e.code === Status.INVALID_ARGUMENT);
  await assert.rejects(client.batchValues('orders', -1), RangeError);
});

test('the sequence messages on the wire', () => {
  assert.deepEqual(nextValueRequest('orders'), Buffer.from('\x0a\x06orders', 'latin1'));
  assert.deepEqual(batchValuesRequest('a', 300), Buffer.from([0x0a, 0x01, 0x61, 0x10, 0xac, 0x02]));
  assert.equal(nextValueResponse(Buffer.from([0x08, 0x2a])), 42n);
  assert.deepEqual(batchValuesResponse(Buffer.from([0x0a, 0x04, 0x01, 0x02, 0xff, 0x01])), [1n, 2n, 255n]);
  assert.deepEqual(batchValuesResponse(Buffer.from([0x08, 0x01, 0x08, 0x02, 0x12, 0x00])), [1n, 2n]);
  const maxInt64 = Buffer.from([0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f]);
  assert.equal(nextValueResponse(maxInt64), 2n ** 63n - 1n);
  assert.throws(() => batchValuesResponse(Buffer.from([0x0a, 0x02, 0x01])));
});
