/**
 * The two calls the client makes, on the wire: the method paths of
 * proto/snowmint/v1/snowmint.proto and their messages in the protobuf encoding, written and read
 * here directly. Nothing is loaded at run time (no `.proto` file, no protobuf library), so the
 * package bundles as any other; only the fields below are used, and test/wire.test.ts checks
 * their numbers and types against the proto file.
 *
 *     NextIdRequest {}                      NextIdResponse { fixed64 id = 1; }
 *     BatchIdsRequest { uint32 count = 1; } BatchIdsResponse { repeated fixed64 ids = 1; }
 *
 * Any other field of an answer (a newer server's) is skipped, as protobuf readers do. Each
 * fixed64 is read as a `bigint` from its eight bytes, never through a JS `number`.
 */

export const NEXT_ID = '/snowmint.v1.IdService/NextId';
export const BATCH_IDS = '/snowmint.v1.IdService/BatchIds';

const VARINT = 0;
const FIXED64 = 1;
const LENGTH = 2;
const FIXED32 = 5;

/** An answer that is not the message it should be. */
export class WireError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'WireError';
  }
}

const EMPTY = Buffer.alloc(0);

/** NextIdRequest {}: every field at its default, so no bytes. */
export function nextIdRequest(): Buffer {
  return EMPTY;
}

/** BatchIdsRequest { count }: field 1 as a varint (omitted at 0, its default). */
export function batchIdsRequest(count: number): Buffer {
  if (!Number.isInteger(count) || count < 0 || count > 0xffff_ffff) {
    throw new RangeError(`count ${count} does not fit a uint32`);
  }
  const bytes = [];
  if (count > 0) {
    bytes.push(0x08);
    while (count >= 0x80) {
      bytes.push((count & 0x7f) | 0x80);
      count = Math.floor(count / 0x80);
    }
    bytes.push(count);
  }
  return Buffer.from(bytes);
}

/** The varint at `at`: its value (below 2^53 in every field read here) and where it ends. */
function varint(data: Buffer, at: number): [number, number] {
  let value = 0;
  let scale = 1;
  for (;;) {
    if (at >= data.length || scale > 2 ** 63) {
      throw new WireError('a varint runs past the message');
    }
    const byte = data[at++]!;
    value += (byte & 0x7f) * scale;
    if ((byte & 0x80) === 0) {
      return [value, at];
    }
    scale *= 0x80;
  }
}

/** Every value of field 1 (fixed64), packed or not; other fields skipped. */
function fixed64s(data: Buffer): bigint[] {
  const ids: bigint[] = [];
  let at = 0;
  const end = data.length;
  while (at < end) {
    let key: number;
    [key, at] = varint(data, at);
    const field = Math.floor(key / 8);
    const kind = key % 8;
    if (kind === VARINT) {
      [, at] = varint(data, at);
    } else if (kind === FIXED64) {
      if (at + 8 > end) {
        throw new WireError('a fixed64 runs past the message');
      }
      if (field === 1) {
        ids.push(data.readBigUInt64LE(at));
      }
      at += 8;
    } else if (kind === LENGTH) {
      let length: number;
      [length, at] = varint(data, at);
      if (at + length > end) {
        throw new WireError('a length-delimited field runs past the message');
      }
      if (field === 1) {
        if (length % 8 !== 0) {
          throw new WireError(`packed fixed64s of ${length} bytes`);
        }
        for (let i = at; i < at + length; i += 8) {
          ids.push(data.readBigUInt64LE(i));
        }
      }
      at += length;
    } else if (kind === FIXED32) {
      at += 4;
    } else {
      throw new WireError(`wire type ${kind} of field ${field}`);
    }
  }
  if (at !== end) {
    throw new WireError('a field runs past the message');
  }
  return ids;
}

/** NextIdResponse's id (0 when absent, as protobuf reads a missing field). */
export function nextIdResponse(data: Buffer): bigint {
  const ids = fixed64s(data);
  return ids.length > 0 ? ids[ids.length - 1]! : 0n;
}

/** BatchIdsResponse's ids. */
export function batchIdsResponse(data: Buffer): bigint[] {
  return fixed64s(data);
}

/** The serializer of requests already encoded. */
export function identity(data: Buffer): Buffer {
  return data;
}
