// Local decoding against the shared vectors, which the server's own decode produced, and the
// exact decoding of IDs from the wire.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { LAYOUT_NAMES, decode, layout, namedLayout, snowmintLayout } from '../src/index.js';
import { ours, vectorFile as file } from './vectors.js';

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
