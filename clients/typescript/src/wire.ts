/**
 * The calls the client makes, on the wire: the method paths of proto/snowmint/v1/snowmint.proto
 * and their messages in the protobuf encoding, written and read here directly. Nothing is
 * loaded at run time (no `.proto` file, no protobuf library), so the package bundles as any
 * other; only the fields below are used, and test/wire.test.ts checks their numbers and types
 * against the proto file.
 *
 *     NextIdRequest {}                        NextIdResponse { fixed64 id = 1; }
 *     BatchIdsRequest { uint32 count = 1; }   BatchIdsResponse { repeated fixed64 ids = 1; }
 *     NextUuidRequest {}                      NextUuidResponse { bytes uuid = 1; }
 *     BatchUuidsRequest { uint32 count = 1; } BatchUuidsResponse { repeated bytes uuids = 1; }
 *     NextValueRequest { string sequence = 1; }
 *                                             NextValueResponse { int64 value = 1; bool ordered = 2; }
 *     BatchValuesRequest { string sequence = 1; uint32 count = 2; }
 *                                             BatchValuesResponse { repeated int64 values = 1; bool ordered = 2; }
 *
 * A refusal's status details (the `grpc-status-details-bin` trailer) are read here too, for the
 * one detail the client uses, the delay of a quota refusal:
 *
 *     google.rpc.Status { repeated google.protobuf.Any details = 3; }
 *     google.protobuf.Any { string type_url = 1; bytes value = 2; }
 *     google.rpc.RetryInfo { google.protobuf.Duration retry_delay = 1; }
 *     google.protobuf.Duration { int64 seconds = 1; int32 nanos = 2; }
 *
 * Any other field of an answer (a newer server's, or the UUIDs' `text`/`texts`, which the
 * client writes itself from the bytes) is skipped, as protobuf readers do. Each fixed64 is read
 * as a `bigint` from its eight bytes, never through a JS `number`; each bytes field as the bytes
 * it holds, whatever their length (the caller checks that a UUID has 16); each int64 as a
 * `bigint` from its varint, two's complement.
 */

export const NEXT_ID = '/snowmint.v1.IdService/NextId';
export const BATCH_IDS = '/snowmint.v1.IdService/BatchIds';
export const NEXT_UUID = '/snowmint.v1.IdService/NextUuid';
export const BATCH_UUIDS = '/snowmint.v1.IdService/BatchUuids';
export const NEXT_VALUE = '/snowmint.v1.IdService/NextValue';
export const BATCH_VALUES = '/snowmint.v1.IdService/BatchValues';

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

/** NextUuidRequest {}: no fields, so no bytes. */
export function nextUuidRequest(): Buffer {
  return EMPTY;
}

/** BatchUuidsRequest { count }: encoded as BatchIdsRequest's, field 1 as a varint. */
export function batchUuidsRequest(count: number): Buffer {
  return batchIdsRequest(count);
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

/**
 * Walks the fields of a message, calling `visit` with each one's number, wire type and the
 * bytes of its value (for a length-delimited field, of its contents).
 */
function fields(data: Buffer, visit: (field: number, kind: number, start: number, end: number) => void): void {
  let at = 0;
  const end = data.length;
  while (at < end) {
    let key: number;
    [key, at] = varint(data, at);
    const field = Math.floor(key / 8);
    const kind = key % 8;
    const start = at;
    if (kind === VARINT) {
      [, at] = varint(data, at);
    } else if (kind === FIXED64) {
      at += 8;
      if (at > end) {
        throw new WireError('a fixed64 runs past the message');
      }
    } else if (kind === LENGTH) {
      let length: number;
      [length, at] = varint(data, at);
      if (at + length > end) {
        throw new WireError('a length-delimited field runs past the message');
      }
      visit(field, kind, at, at + length);
      at += length;
      continue;
    } else if (kind === FIXED32) {
      at += 4;
      if (at > end) {
        throw new WireError('a field runs past the message');
      }
    } else {
      throw new WireError(`wire type ${kind} of field ${field}`);
    }
    visit(field, kind, start, at);
  }
}

/** Every value of field 1 (fixed64), packed or not; other fields skipped. */
function fixed64s(data: Buffer): bigint[] {
  const ids: bigint[] = [];
  fields(data, (field, kind, start, end) => {
    if (field !== 1) {
      return;
    }
    if (kind === FIXED64) {
      ids.push(data.readBigUInt64LE(start));
    } else if (kind === LENGTH) {
      if ((end - start) % 8 !== 0) {
        throw new WireError(`packed fixed64s of ${end - start} bytes`);
      }
      for (let i = start; i < end; i += 8) {
        ids.push(data.readBigUInt64LE(i));
      }
    }
  });
  return ids;
}

/**
 * Every value of field 1 (bytes), as views of `data`; other fields skipped. Bytes are never
 * packed, so field 1 of any other wire type is not the message it should be.
 */
function byteStrings(data: Buffer): Buffer[] {
  const values: Buffer[] = [];
  fields(data, (field, kind, start, end) => {
    if (field !== 1) {
      return;
    }
    if (kind !== LENGTH) {
      throw new WireError(`field 1 of wire type ${kind}, not bytes`);
    }
    values.push(data.subarray(start, end));
  });
  return values;
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

/** NextUuidResponse's uuid (empty when absent, as protobuf reads a missing field). */
export function nextUuidResponse(data: Buffer): Buffer {
  const uuids = byteStrings(data);
  return uuids.length > 0 ? uuids[uuids.length - 1]! : EMPTY;
}

/** BatchUuidsResponse's uuids. */
export function batchUuidsResponse(data: Buffer): Buffer[] {
  return byteStrings(data);
}

/** `value` as a varint's bytes (a whole number from 0 to 2^32 - 1 here). */
function putVarint(bytes: number[], value: number): void {
  while (value >= 0x80) {
    bytes.push((value & 0x7f) | 0x80);
    value = Math.floor(value / 0x80);
  }
  bytes.push(value);
}

/** Field 1, a sequence's name, as a string (omitted when empty, its default). */
function sequenceField(name: string): number[] {
  const bytes: number[] = [];
  const utf8 = Buffer.from(name, 'utf8');
  if (utf8.length > 0) {
    bytes.push(0x0a);
    putVarint(bytes, utf8.length);
    bytes.push(...utf8);
  }
  return bytes;
}

/** NextValueRequest { sequence }. */
export function nextValueRequest(name: string): Buffer {
  return Buffer.from(sequenceField(name));
}

/** BatchValuesRequest { sequence, count }: count as field 2, a varint (omitted at 0). */
export function batchValuesRequest(name: string, count: number): Buffer {
  if (!Number.isInteger(count) || count < 0 || count > 0xffff_ffff) {
    throw new RangeError(`count ${count} does not fit a uint32`);
  }
  const bytes = sequenceField(name);
  if (count > 0) {
    bytes.push(0x10);
    putVarint(bytes, count);
  }
  return Buffer.from(bytes);
}

/** The varint at `at` as a signed 64-bit `bigint` (two's complement), and where it ends. */
function bigVarint(data: Buffer, at: number): [bigint, number] {
  let value = 0n;
  let shift = 0n;
  for (;;) {
    if (at >= data.length || shift > 63n) {
      throw new WireError('a varint runs past the message');
    }
    const byte = data[at++]!;
    value |= BigInt(byte & 0x7f) << shift;
    if ((byte & 0x80) === 0) {
      return [BigInt.asIntN(64, value), at];
    }
    shift += 7n;
  }
}

/** Every value of field 1 (int64), packed or not; other fields skipped. */
function int64s(data: Buffer): bigint[] {
  const values: bigint[] = [];
  fields(data, (field, kind, start, end) => {
    if (field !== 1) {
      return;
    }
    if (kind === VARINT) {
      values.push(bigVarint(data, start)[0]);
    } else if (kind === LENGTH) {
      let at = start;
      while (at < end) {
        let value: bigint;
        [value, at] = bigVarint(data, at);
        values.push(value);
      }
      if (at !== end) {
        throw new WireError('packed int64s run past their field');
      }
    } else {
      throw new WireError(`field 1 of wire type ${kind}, not int64`);
    }
  });
  return values;
}

/** NextValueResponse's value (0 when absent, as protobuf reads a missing field). */
export function nextValueResponse(data: Buffer): bigint {
  const values = int64s(data);
  return values.length > 0 ? values[values.length - 1]! : 0n;
}

/** BatchValuesResponse's values. */
export function batchValuesResponse(data: Buffer): bigint[] {
  return int64s(data);
}

/** A sequence answer's values, and whether the sequence is ordered. */
export interface SequenceAnswer {
  values: bigint[];
  ordered: boolean;
}

/** NextValueResponse's or BatchValuesResponse's `ordered` (field 2, a varint; false when absent, the last one wins). */
export function orderedOf(data: Buffer): boolean {
  let ordered = false;
  fields(data, (field, kind, start) => {
    if (field === 2 && kind === VARINT) {
      ordered = varint(data, start)[0] !== 0;
    }
  });
  return ordered;
}

/** The end of `google.rpc.RetryInfo`'s type URL: its name, after the host (`type.googleapis.com/` by convention, not checked). */
const RETRY_INFO = '/google.rpc.RetryInfo';

/**
 * The retry delay, in ms, of a `google.rpc.Status` (the bytes of a `grpc-status-details-bin`
 * trailer): that of its first `google.rpc.RetryInfo` detail. `undefined` when it has none, and
 * when the blob is not such a message or the delay is negative: a malformed blob is no
 * `RetryInfo`, never an error.
 */
export function retryDelayMs(status: Buffer): number | undefined {
  try {
    let delay: number | undefined;
    let found = false;
    fields(status, (field, kind, start, end) => {
      if (found || field !== 3 || kind !== LENGTH) {
        return;
      }
      const any = status.subarray(start, end);
      let typeUrl = '';
      let value: Buffer = EMPTY;
      fields(any, (anyField, anyKind, anyStart, anyEnd) => {
        if (anyField === 1 && anyKind === LENGTH) {
          typeUrl = any.toString('utf8', anyStart, anyEnd);
        } else if (anyField === 2 && anyKind === LENGTH) {
          value = any.subarray(anyStart, anyEnd);
        }
      });
      if (`/${typeUrl}`.endsWith(RETRY_INFO)) {
        found = true;
        delay = retryInfoDelayMs(value);
      }
    });
    return delay;
  } catch (error) {
    if (error instanceof WireError) {
      return undefined;
    }
    throw error;
  }
}

/** RetryInfo's `retry_delay` in ms (0 when absent, as protobuf reads a missing field); `undefined` when negative. */
function retryInfoDelayMs(retryInfo: Buffer): number | undefined {
  let seconds = 0n;
  let nanos = 0n;
  fields(retryInfo, (field, kind, start, end) => {
    if (field !== 1 || kind !== LENGTH) {
      return;
    }
    const duration = retryInfo.subarray(start, end);
    fields(duration, (durationField, durationKind, durationStart) => {
      if (durationField === 1 && durationKind === VARINT) {
        seconds = bigVarint(duration, durationStart)[0];
      } else if (durationField === 2 && durationKind === VARINT) {
        nanos = BigInt.asIntN(32, bigVarint(duration, durationStart)[0]);
      }
    });
  });
  const ms = Number(seconds) * 1000 + Number(nanos) / 1e6;
  return ms >= 0 ? ms : undefined;
}

/** The serializer of requests already encoded. */
export function identity(data: Buffer): Buffer {
  return data;
}
