// The client's own encoding of its calls (src/wire.ts): the fields it reads and writes are
// those of proto/snowmint/v1/snowmint.proto, and it reads what any protobuf writer may send,
// every fixed64 exactly, past 2^53 and up to 2^64 - 1.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';

import {
  BATCH_IDS,
  BATCH_UUIDS,
  NEXT_ID,
  NEXT_UUID,
  WireError,
  batchIdsRequest,
  batchIdsResponse,
  batchUuidsRequest,
  batchUuidsResponse,
  nextIdRequest,
  nextIdResponse,
  nextUuidRequest,
  nextUuidResponse,
  retryDelayMs,
} from '../src/wire.js';

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

test('the UUID calls’ fields and methods are the proto’s', () => {
  assert.match(PROTO, /^message NextUuidRequest \{\}$/m);
  assert.deepEqual(fields('NextUuidResponse').get('uuid'), ['bytes', 1]);
  assert.deepEqual(fields('NextUuidResponse').get('text'), ['string', 2]);
  assert.deepEqual(fields('BatchUuidsRequest').get('count'), ['uint32', 1]);
  assert.deepEqual(fields('BatchUuidsResponse').get('uuids'), ['repeated bytes', 1]);
  assert.deepEqual(fields('BatchUuidsResponse').get('texts'), ['repeated string', 2]);
  assert.match(PROTO, /rpc NextUuid\(NextUuidRequest\) returns \(NextUuidResponse\);/);
  assert.match(PROTO, /rpc BatchUuids\(BatchUuidsRequest\) returns \(BatchUuidsResponse\);/);
  assert.deepEqual([NEXT_UUID, BATCH_UUIDS], ['/snowmint.v1.IdService/NextUuid', '/snowmint.v1.IdService/BatchUuids']);
});

test('requests', () => {
  assert.equal(nextIdRequest().length, 0);
  assert.deepEqual([...batchIdsRequest(0)], []);
  assert.deepEqual([...batchIdsRequest(1)], [0x08, 0x01]);
  assert.deepEqual([...batchIdsRequest(300)], [0x08, 0xac, 0x02]);
  assert.deepEqual([...batchIdsRequest(2 ** 32 - 1)], [0x08, 0xff, 0xff, 0xff, 0xff, 0x0f]);
  assert.throws(() => batchIdsRequest(2 ** 32), RangeError);
  assert.equal(nextUuidRequest().length, 0);
  assert.deepEqual([...batchUuidsRequest(0)], []);
  assert.deepEqual([...batchUuidsRequest(1)], [0x08, 0x01]);
  assert.deepEqual([...batchUuidsRequest(65536)], [0x08, 0x80, 0x80, 0x04]);
  assert.deepEqual([...batchUuidsRequest(2 ** 32 - 1)], [0x08, 0xff, 0xff, 0xff, 0xff, 0x0f]);
  assert.throws(() => batchUuidsRequest(-1), RangeError);
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

/** A length-delimited field: its key, its length as a varint, its bytes. */
function lengthField(field: number, bytes: Uint8Array): Buffer {
  const length = [];
  let n = bytes.length;
  while (n >= 0x80) {
    length.push((n & 0x7f) | 0x80);
    n >>= 7;
  }
  length.push(n);
  return Buffer.concat([Buffer.from([(field << 3) | 2, ...length]), bytes]);
}

const uuidBytes = (seed: number) => Buffer.from(Array.from({ length: 16 }, (_, i) => (seed * 17 + i * 31) & 0xff));

test('UUID answers: bytes, with texts and fields unknown here skipped', () => {
  const uuids = [uuidBytes(1), uuidBytes(2), Buffer.alloc(16), Buffer.alloc(16, 0xff), uuidBytes(200)];
  const text = (u: Buffer) => lengthField(2, Buffer.from(u.toString('hex')));
  // As the server writes it: every uuid (1), then every text (2).
  const answer = Buffer.concat([...uuids.map((u) => lengthField(1, u)), ...uuids.map(text)]);
  assert.deepEqual(batchUuidsResponse(answer).map((u) => [...u]), uuids.map((u) => [...u]));
  // Interleaved, with a varint field 3, a fixed32 field 9 and a fixed64 field 10 about.
  const extra = Buffer.from([0x18, 0x96, 0x01, 0x4d, 1, 2, 3, 4, 0x51, 0, 0, 0, 0, 0, 0, 0, 0]);
  const mixed = Buffer.concat(uuids.flatMap((u) => [extra, text(u), lengthField(1, u)]));
  assert.deepEqual(batchUuidsResponse(mixed).map((u) => [...u]), uuids.map((u) => [...u]));
  assert.deepEqual(batchUuidsResponse(Buffer.alloc(0)), []);
  // Read as they are, whatever their length: the client checks for 16.
  assert.deepEqual(batchUuidsResponse(Buffer.concat([lengthField(1, Buffer.alloc(0)), lengthField(1, Buffer.alloc(300, 7))])).map((u) => u.length), [0, 300]);

  const one = uuidBytes(3);
  assert.deepEqual([...nextUuidResponse(Buffer.concat([lengthField(1, one), text(one)]))], [...one]);
  assert.deepEqual([...nextUuidResponse(Buffer.concat([text(one), extra, lengthField(1, one)]))], [...one]);
  // The last value of a field that is not repeated wins, as protobuf reads it.
  assert.deepEqual([...nextUuidResponse(Buffer.concat([lengthField(1, uuidBytes(4)), lengthField(1, one)]))], [...one]);
  assert.equal(nextUuidResponse(Buffer.alloc(0)).length, 0);
  assert.equal(nextUuidResponse(text(one)).length, 0);
});

test('broken UUID answers are refused', () => {
  const broken = [
    [0x0a, 0x10, ...Array(8).fill(0)], // 16 bytes announced, 8 there
    [0x0a], // no length
    [0x0a, 0x80], // a length that does not end
    [0x09, ...Array(8).fill(0)], // field 1 as a fixed64, not bytes
    [0x08, 0x01], // field 1 as a varint
    [0x0d, 1, 2, 3, 4], // field 1 as a fixed32
    [0x12, 0x05, 0x61], // a text that runs past the message
    [0x0b], // a group
    [0x4d, 1, 2], // a fixed32 that runs past the message
  ];
  for (const bytes of broken) {
    assert.throws(() => batchUuidsResponse(Buffer.from(bytes)), WireError, JSON.stringify(bytes));
    assert.throws(() => nextUuidResponse(Buffer.from(bytes)), WireError, JSON.stringify(bytes));
  }
});

/** A varint field: its key, then `value` (two's complement in 64 bits, as int64 and int32 are written). */
function varintField(field: number, value: bigint): Buffer {
  const bytes = [field << 3];
  let n = BigInt.asUintN(64, value);
  while (n >= 0x80n) {
    bytes.push(Number(n & 0x7fn) | 0x80);
    n >>= 7n;
  }
  bytes.push(Number(n));
  return Buffer.from(bytes);
}

/** A google.protobuf.Any of `typeUrl` holding `value`. */
function any(typeUrl: string, value: Buffer): Buffer {
  return lengthField(3, Buffer.concat([lengthField(1, Buffer.from(typeUrl)), lengthField(2, value)]));
}

/** A google.rpc.RetryInfo's Any, its retry_delay a Duration of `seconds` and `nanos`. */
function retryInfo(seconds: bigint, nanos: bigint, typeUrl = 'type.googleapis.com/google.rpc.RetryInfo'): Buffer {
  return any(typeUrl, lengthField(1, Buffer.concat([varintField(1, seconds), varintField(2, nanos)])));
}

/** A google.rpc.Status of RESOURCE_EXHAUSTED with a message and `details`. */
function status(...details: Buffer[]): Buffer {
  return Buffer.concat([varintField(1, 8n), lengthField(2, Buffer.from('over the quota of tenant a')), ...details]);
}

test('the retry delay of a quota refusal’s status details', () => {
  const other = any('type.googleapis.com/google.rpc.ErrorInfo', Buffer.concat([lengthField(1, Buffer.from('QUOTA'))]));
  assert.equal(retryDelayMs(status(retryInfo(0n, 200_000_000n))), 200);
  assert.equal(retryDelayMs(status(other, retryInfo(1n, 500_000_000n), other)), 1500);
  assert.equal(retryDelayMs(status(retryInfo(0n, 1n))), 0.000001);
  assert.equal(retryDelayMs(status(retryInfo(3n, 0n, 'google.rpc.RetryInfo'))), 3000);
  // The first RetryInfo counts; an empty one is a delay of 0, as protobuf reads it.
  assert.equal(retryDelayMs(status(retryInfo(0n, 5_000_000n), retryInfo(9n, 0n))), 5);
  assert.equal(retryDelayMs(status(any('type.googleapis.com/google.rpc.RetryInfo', Buffer.alloc(0)))), 0);

  // No RetryInfo: none, another detail, a look-alike type, a delay that is negative.
  assert.equal(retryDelayMs(status()), undefined);
  assert.equal(retryDelayMs(Buffer.alloc(0)), undefined);
  assert.equal(retryDelayMs(status(other)), undefined);
  assert.equal(retryDelayMs(status(retryInfo(1n, 0n, 'type.googleapis.com/xgoogle.rpc.RetryInfo'))), undefined);
  assert.equal(retryDelayMs(status(retryInfo(-1n, 0n))), undefined);
  assert.equal(retryDelayMs(status(retryInfo(0n, -5n))), undefined);

  // Garbage is no RetryInfo, never an error.
  const good = status(other, retryInfo(0n, 200_000_000n));
  for (let cut = 1; cut < good.length; cut++) {
    const delay = retryDelayMs(good.subarray(0, cut));
    assert.ok(delay === undefined || delay === 200, `cut at ${cut}: ${delay}`);
  }
  for (const garbage of [[0x0b], [0x80], [0x1a, 0x05, 0x0a], [0x1a, 0x80], [0xff, 0xff, 0xff], [0x1a, 0x02, 0x0a, 0x7f]]) {
    assert.equal(retryDelayMs(Buffer.from(garbage)), undefined, JSON.stringify(garbage));
  }
  assert.equal(retryDelayMs(Buffer.from('not a protobuf message at all, but text')), undefined);
  let seed = 7;
  for (let i = 0; i < 1000; i++) {
    const random = Buffer.from(Array.from({ length: 1 + (i % 40) }, () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) & 0xff));
    const delay = retryDelayMs(random);
    assert.ok(delay === undefined || (Number.isFinite(delay) && delay >= 0), `${random.toString('hex')}: ${delay}`);
  }
});
