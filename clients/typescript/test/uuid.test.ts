// UUIDv7s, locally: the text form and decoding against the shared vectors
// (clients/testdata/uuid-vectors.json, which the server's own code produced), and the value type.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import {
  Uuid,
  UuidError,
  decode,
  decodeUuid,
  formatUuid,
  parseUuid,
  snowmintLayout,
  type UuidErrorKind,
} from '../src/index.js';
import { ours, readTestdata, vectorFile } from './vectors.js';

interface UuidVectorFile {
  comment: string;
  vectors: { layout: string; id: string; random: number; uuid: string; unix_ms: string; slot: number; sequence: number }[];
  invalid: { layout: string; uuid: string; kind: UuidErrorKind; reason: string }[];
  malformed: { text: string; reason: string }[];
}

const file: UuidVectorFile = readTestdata('uuid-vectors.json');

function isUuidError(kind: UuidErrorKind) {
  return (error: unknown) => error instanceof UuidError && error.kind === kind;
}

describe('the shared UUID vectors', () => {
  test('the file has entries of every section, for layouts vectors.json defines', () => {
    assert.ok(file.vectors.length > 0 && file.invalid.length > 0 && file.malformed.length > 0);
    for (const entry of [...file.vectors, ...file.invalid]) {
      assert.ok(entry.layout in vectorFile.layouts, `unknown layout ${entry.layout}`);
    }
  });

  for (const name of Object.keys(vectorFile.layouts)) {
    test(`every vector of ${name} parses, decodes and writes back`, () => {
      const l = ours(name);
      const vectors = file.vectors.filter((v) => v.layout === name);
      assert.ok(vectors.length > 0, `no vectors for ${name}`);
      for (const v of vectors) {
        const uuid = parseUuid(v.uuid);
        const d = decodeUuid(uuid, l);
        assert.deepEqual(
          { id: d.id.toString(), unix_ms: d.unixMs.toString(), slot: d.slot, sequence: d.sequence, random: d.random },
          { id: v.id, unix_ms: v.unix_ms, slot: v.slot, sequence: v.sequence, random: v.random },
          v.uuid,
        );
        // The UUID and the ID it was made from tell the same time, worker and sequence.
        const id = decode(d.id, l);
        assert.deepEqual([id.unixMs, id.tick, id.workerId, id.sequence, id.time], [d.unixMs, d.tick, d.slot, d.sequence, d.time]);
        assert.equal(uuid.toString(), v.uuid);
        assert.equal(formatUuid(uuid), v.uuid);
        assert.equal(formatUuid(uuid.bytes), v.uuid);
        assert.equal(uuid.version, 7);
        const upper = parseUuid(v.uuid.toUpperCase());
        assert.ok(upper.equals(uuid), v.uuid);
        assert.deepEqual(upper.bytes, uuid.bytes);
        assert.equal(upper.toString(), v.uuid);
        // A string is parsed first.
        assert.equal(decodeUuid(v.uuid.toUpperCase(), l).id, d.id);
      }
    });

    test(`every invalid UUID of ${name} is refused with its kind`, () => {
      const l = ours(name);
      const invalid = file.invalid.filter((v) => v.layout === name);
      assert.ok(invalid.length > 0, `no invalid UUIDs for ${name}`);
      for (const bad of invalid) {
        const uuid = parseUuid(bad.uuid);
        assert.throws(() => decodeUuid(uuid, l), isUuidError(bad.kind), `${bad.uuid} with ${name}: ${bad.reason}`);
      }
    });
  }

  test('every malformed text is refused', () => {
    for (const bad of file.malformed) {
      assert.throws(() => parseUuid(bad.text), isUuidError('text'), `${JSON.stringify(bad.text)}: ${bad.reason}`);
      assert.throws(() => decodeUuid(bad.text), isUuidError('text'), `${JSON.stringify(bad.text)}: ${bad.reason}`);
    }
  });
});

describe('parseUuid', () => {
  const text = '0190163d-8694-739b-aea5-6d2a3f0b1c4e';

  test('takes hex digits of either case, mixed too', () => {
    assert.equal(parseUuid('0190163D-8694-739b-AEA5-6d2a3F0B1c4e').toString(), text);
    assert.equal(parseUuid('ABCDEFAB-CDEF-ABCD-EFAB-CDEFABCDEFAB').toString(), 'abcdefab-cdef-abcd-efab-cdefabcdefab');
    assert.equal(parseUuid('00000000-0000-0000-0000-000000000000').toString(), '00000000-0000-0000-0000-000000000000');
    assert.equal(parseUuid('ffffffff-ffff-ffff-ffff-ffffffffffff').toString(), 'ffffffff-ffff-ffff-ffff-ffffffffffff');
    assert.deepEqual(
      [...parseUuid(text).bytes],
      [0x01, 0x90, 0x16, 0x3d, 0x86, 0x94, 0x73, 0x9b, 0xae, 0xa5, 0x6d, 0x2a, 0x3f, 0x0b, 0x1c, 0x4e],
    );
    assert.ok(Uuid.parse(text).equals(parseUuid(text)));
  });

  test('refuses every other form, each character checked', () => {
    // Every character replaced by one that does not belong there.
    for (let i = 0; i < text.length; i++) {
      for (const c of text[i] === '-' ? ['0', 'a', '_', ' '] : ['-', 'g', 'G', ' ', 'x', '\u0660', '\uff10']) {
        const bad = text.slice(0, i) + c + text.slice(i + 1);
        assert.throws(() => parseUuid(bad), isUuidError('text'), JSON.stringify(bad));
      }
    }
    for (const bad of [`${text}\n`, `\t${text}`, text.replaceAll('-', ''), `{${text}}`, `urn:uuid:${text}`, text.slice(1),
      `${text.slice(0, 35)}\u{1f600}`]) {
      assert.throws(() => parseUuid(bad), isUuidError('text'), JSON.stringify(bad));
    }
    assert.throws(() => parseUuid(42 as unknown as string), isUuidError('text'));
  });
});

describe('the Uuid value', () => {
  const layout = snowmintLayout();
  const a = parseUuid('019b76da-a800-7000-8000-000000000000');
  const b = parseUuid('019b76da-a800-7000-8000-000000000001');
  const c = parseUuid('019b76da-a801-7000-8000-000000000000');

  test('keeps its own bytes', () => {
    const bytes = new Uint8Array(16).fill(0xab);
    const uuid = new Uuid(bytes);
    bytes[0] = 0;
    assert.equal(uuid.toString(), 'abababab-abab-abab-abab-abababababab');
    uuid.bytes[0] = 0;
    assert.equal(uuid.bytes[0], 0xab);
    assert.equal(uuid.toString(), 'abababab-abab-abab-abab-abababababab');
    assert.ok(new Uuid(Buffer.from(bytes)).equals(new Uuid(bytes)));
  });

  test('is 16 bytes', () => {
    for (const length of [0, 15, 17, 32]) {
      assert.throws(() => new Uuid(new Uint8Array(length)), RangeError);
      assert.throws(() => formatUuid(new Uint8Array(length)), RangeError);
    }
    assert.throws(() => new Uuid([1, 2, 3] as unknown as Uint8Array), RangeError);
  });

  test('orders as its bytes, numbers and text', () => {
    const sorted = [c, b, a, b].sort(Uuid.compare);
    assert.deepEqual(sorted.map(String), [a, b, b, c].map(String));
    assert.ok(a.compare(b) < 0 && b.compare(a) > 0 && c.compare(b) > 0);
    assert.equal(b.compare(parseUuid(b.toString().toUpperCase())), 0);
    assert.ok(b.equals(parseUuid(b.toString())) && !b.equals(a));
    assert.ok(a.toString() < b.toString() && b.toString() < c.toString());
    // Every byte position counts, unsigned: 0x80 sorts after 0x7f.
    for (let i = 0; i < 16; i++) {
      const low = new Uint8Array(16).fill(0x7f);
      const high = new Uint8Array(16).fill(0x7f);
      high[i] = 0x80;
      assert.ok(new Uuid(low).compare(new Uuid(high)) < 0, `byte ${i}`);
    }
  });

  test('writes itself as its text in JSON and templates', () => {
    assert.equal(JSON.stringify({ id: a }), `{"id":"${a.toString()}"}`);
    assert.equal(`${a}`, '019b76da-a800-7000-8000-000000000000');
  });

  test('decodes with the default layout unless given one, and by name', () => {
    const d = decodeUuid(c);
    assert.deepEqual(d.layout, layout);
    assert.equal(d.uuid, c);
    assert.deepEqual([d.id, d.tick, d.unixMs, d.slot, d.sequence, d.random], [1n << 22n, 1n, 1_767_225_600_001n, 0, 0, 0]);
    assert.equal(d.time, '2026-01-01T00:00:00.001Z');
    assert.equal(decodeUuid(c, 'snowmint').id, 1n << 22n);
    assert.throws(() => decodeUuid(c, 'sonyflake'), isUuidError('tick'));
    assert.throws(() => decodeUuid(c, 'uuid' as 'snowmint'), RangeError);
  });

  test('decodes the last tick of a layout, and refuses the one past it', () => {
    // A small layout: 2 bits of time, so ticks 0 to 3 from the epoch, of 10 ms each.
    const tiny = { ...snowmintLayout(), name: 'tiny', timeBits: 2, tickMs: 10, order: 'sequence_worker' as const };
    const at = (unixMs: number, slot: number, sequence: number) => {
      const minted = (BigInt(slot) << 22n) | BigInt(sequence);
      const value = (BigInt(unixMs) << 80n) | (7n << 76n) | ((minted >> 30n) << 64n) | (2n << 62n) | ((minted & ((1n << 30n) - 1n)) << 32n) | 5n;
      return new Uuid(Buffer.from(value.toString(16).padStart(32, '0'), 'hex'));
    };
    const epoch = tiny.epochMs;
    const last = decodeUuid(at(epoch + 30, 1023, 4095), tiny);
    assert.deepEqual([last.tick, last.slot, last.sequence, last.random], [3n, 1023, 4095, 5]);
    // sequence | worker: the sequence above the worker.
    assert.equal(last.id, (3n << 22n) | (4095n << 10n) | 1023n);
    assert.throws(() => decodeUuid(at(epoch + 40, 0, 0), tiny), isUuidError('tick'));
    assert.throws(() => decodeUuid(at(epoch + 35, 0, 0), tiny), isUuidError('tick'));
    assert.throws(() => decodeUuid(at(epoch - 10, 0, 0), tiny), isUuidError('tick'));
    assert.throws(() => decodeUuid(at(epoch, 1024, 0), tiny), isUuidError('fields'));
    assert.throws(() => decodeUuid(at(epoch, 0, 4096), tiny), isUuidError('fields'));
    // The widest minted field: slot 2^20 - 1 and sequence 2^22 - 1.
    const wide = { ...tiny, name: 'wide', timeBits: 22, workerBits: 20, sequenceBits: 22, order: 'worker_sequence' as const };
    const widest = decodeUuid(at(epoch + 10, 2 ** 20 - 1, 2 ** 22 - 1), wide);
    assert.deepEqual([widest.tick, widest.slot, widest.sequence], [1n, 2 ** 20 - 1, 2 ** 22 - 1]);
    assert.equal(widest.id, (1n << 42n) | ((2n ** 20n - 1n) << 22n) | (2n ** 22n - 1n));
  });
});
