// The client's own encoding of its two calls (src/wire.ts): the fields it reads and writes are
// those of proto/snowmint/v1/snowmint.proto, and it reads what any protobuf writer may send,
// every fixed64 exactly, past 2^53 and up to 2^64 - 1.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';

import { BATCH_IDS, NEXT_ID, WireError, batchIdsRequest, batchIdsResponse, nextIdRequest, nextIdResponse } from '../src/wire.js';

const PROTO = readFileSync(new URL('../../../../proto/snowmint/v1/snowmint.proto', import.meta.url), 'utf8');

function fields(message: string): Map<string, [string, number]> {
  const body = new RegExp(`^message ${message} \\{(.*?)^\\}`, 'ms').exec(PROTO);
  assert.ok(body, `no message ${message} in the proto`);
  const found = new Map<string, [string, number]>();
  for (const [, kind, name, number] of body[1]!.matchAll(/^\s+(repeated \w+|\w+) (\w+) = (\d+);/gm)) {
    found.set(name!, [kind!, Number(number)]);
  }
  return found;
}

test('the fields and methods are the proto’s', () => {
  assert.deepEqual(fields('NextIdResponse').get('id'), ['fixed64', 1]);
  assert.deepEqual(fields('BatchIdsRequest').get('count'), ['uint32', 1]);
  assert.deepEqual(fields('BatchIdsResponse').get('ids'), ['repeated fixed64', 1]);
  assert.match(PROTO, /^package snowmint\.v1;/m);
  assert.match(PROTO, /rpc NextId\(NextIdRequest\) returns \(NextIdResponse\);/);
  assert.match(PROTO, /rpc BatchIds\(BatchIdsRequest\) returns \(BatchIdsResponse\);/);
  assert.deepEqual([NEXT_ID, BATCH_IDS], ['/snowmint.v1.IdService/NextId', '/snowmint.v1.IdService/BatchIds']);
});

test('requests', () => {
  assert.equal(nextIdRequest().length, 0);
  assert.deepEqual([...batchIdsRequest(0)], []);
  assert.deepEqual([...batchIdsRequest(1)], [0x08, 0x01]);
  assert.deepEqual([...batchIdsRequest(300)], [0x08, 0xac, 0x02]);
  assert.deepEqual([...batchIdsRequest(2 ** 32 - 1)], [0x08, 0xff, 0xff, 0xff, 0xff, 0x0f]);
  assert.throws(() => batchIdsRequest(2 ** 32), RangeError);
});

function fixed64(id: bigint): Buffer {
  const bytes = Buffer.alloc(8);
  bytes.writeBigUInt64LE(id);
  return bytes;
}

test('answers, packed or not, with fields unknown here', () => {
  const ids = [0n, 1n, 2n ** 53n + 1n, 2n ** 63n - 1n, 2n ** 63n, 2n ** 64n - 1n, 175928847299117063n];
  const packed = Buffer.concat([Buffer.from([0x0a, 8 * ids.length]), ...ids.map(fixed64)]);
  assert.deepEqual(batchIdsResponse(packed), ids);
  const unpacked = Buffer.concat(ids.map((id) => Buffer.concat([Buffer.from([0x09]), fixed64(id)])));
  assert.deepEqual(batchIdsResponse(unpacked), ids);
  // texts (2, strings), key_version (3, varint), a fixed32 field 9 and a fixed64 field 10.
  const extra = Buffer.from([0x12, 0x02, 0x61, 0x62, 0x18, 0x96, 0x01, 0x4d, 1, 2, 3, 4, 0x51, 0, 0, 0, 0, 0, 0, 0, 0]);
  assert.deepEqual(batchIdsResponse(Buffer.concat([extra, packed, extra])), ids);
  assert.deepEqual(batchIdsResponse(Buffer.alloc(0)), []);
  assert.equal(nextIdResponse(Buffer.concat([Buffer.from([0x09]), fixed64(42n), Buffer.from([0x12, 0x00])])), 42n);
  assert.equal(nextIdResponse(Buffer.alloc(0)), 0n);
});

test('broken answers are refused', () => {
  for (const broken of [[0x09, 1, 2], [0x0a, 0x10, ...Array(8).fill(0)], [0x0a, 3, 0, 0, 0], [0x0b], [0x80], [0x18]]) {
    assert.throws(() => batchIdsResponse(Buffer.from(broken)), WireError, JSON.stringify(broken));
  }
});
