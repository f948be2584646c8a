// Local decoding against the shared vectors, which the server's own decode produced, and the
// exact decoding of IDs from the wire.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, test } from 'node:test';

import { LAYOUT_NAMES, decode, layout, namedLayout, snowmintLayout, type FieldOrder, type Layout } from '../src/index.js';

interface VectorFile {
  layouts: Record<string, {
    epoch_ms: string;
    tick_ms: number;
    time_bits: number;
    worker_bits: number;
    sequence_bits: number;
    order: FieldOrder;
  }>;
  vectors: { layout: string; id: string; unix_ms: string; tick: string; worker_id: number; sequence: number; time: string }[];
  invalid: { layout: string; id: string; reason: string }[];
}

const file: VectorFile = JSON.parse(
  readFileSync(new URL('../../../testdata/vectors.json', import.meta.url), 'utf8'),
  // 64-bit values are strings in the file; a stray number past 2^53 would be wrong already.
  (key, value) => {
    if (typeof value === 'number' && !Number.isSafeInteger(value)) {
      throw new Error(`${key}: ${value} is not exact as a JSON number`);
    }
    return value;
  },
);

/**
 * The client's own layout for a name of the file: a preset by name, or a snowmint layout
 * built from its widths. Either way it must match the file's definition field by field.
 */
function ours(name: string): Layout {
  const def = file.layouts[name]!;
  const fromFile = layout({
    name,
    epochMs: Number(def.epoch_ms),
    tickMs: def.tick_ms,
    timeBits: def.time_bits,
    workerBits: def.worker_bits,
    sequenceBits: def.sequence_bits,
    order: def.order,
  });
  const own = (LAYOUT_NAMES as readonly string[]).includes(name)
    ? namedLayout(name)
    : snowmintLayout({ epochMs: fromFile.epochMs, workerBits: fromFile.workerBits, sequenceBits: fromFile.sequenceBits });
  assert.deepEqual({ ...own, name }, fromFile, `layout ${name} differs from the vector file`);
  return own;
}

describe('decode agrees with every shared vector', () => {
  test('the file has vectors and invalid IDs for layouts it defines', () => {
    assert.ok(file.vectors.length > 0 && file.invalid.length > 0);
    for (const entry of [...file.vectors, ...file.invalid]) {
      assert.ok(entry.layout in file.layouts, `unknown layout ${entry.layout}`);
    }
  });

  for (const name of Object.keys(file.layouts)) {
    test(name, () => {
      const l = ours(name);
      const vectors = file.vectors.filter((v) => v.layout === name);
      assert.ok(vectors.length > 0, `no vectors for ${name}`);
      for (const v of vectors) {
        const d = decode(BigInt(v.id), l);
        assert.deepEqual(
          { id: d.id.toString(), unix_ms: d.unixMs.toString(), tick: d.tick.toString(), worker_id: d.workerId, sequence: d.sequence, time: d.time },
          { id: v.id, unix_ms: v.unix_ms, tick: v.tick, worker_id: v.worker_id, sequence: v.sequence, time: v.time },
        );
      }
      for (const bad of file.invalid.filter((v) => v.layout === name)) {
        assert.throws(() => decode(BigInt(bad.id), l), RangeError, `${bad.id} decoded: ${bad.reason}`);
      }
    });
  }
});

test('decode takes a preset by name, and snowmint by default', () => {
  const id = (1n << 22n) | (3n << 12n) | 4n;
  assert.equal(decode(id).time, '2026-01-01T00:00:00.001Z');
  assert.equal(decode(id, 'snowmint').workerId, 3);
  assert.equal(decode(2n ** 64n - 1n, 'discord').tick, 2n ** 42n - 1n);
});

test('bad layouts and IDs are refused with the reason', () => {
  assert.throws(() => namedLayout('uuid'), (e: Error) => LAYOUT_NAMES.every((n) => e.message.includes(n)));
  assert.throws(() => namedLayout('toString'), RangeError);
  assert.throws(() => snowmintLayout({ workerBits: 30, sequenceBits: 34 }), /0 to 32/);
  assert.throws(() => layout({ ...namedLayout('discord'), sequenceBits: 13 }), /fit 64 bits/);
  assert.throws(() => decode(-1n), /not an unsigned 64-bit/);
  assert.throws(() => decode(2n ** 64n, 'discord'), /not an unsigned 64-bit/);
});
