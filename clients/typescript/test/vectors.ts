/**
 * The shared test vectors of clients/testdata/vectors.json, which the server's own code
 * produced, and the client's layout for each of the file's layout names.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';

import { LAYOUT_NAMES, layout, namedLayout, snowmintLayout, type FieldOrder, type Layout } from '../src/index.js';

export interface VectorFile {
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

/** A file of clients/testdata, its 64-bit values (strings) checked never to be inexact numbers. */
export function readTestdata<T>(name: string): T {
  return JSON.parse(
    readFileSync(new URL(`../../../testdata/${name}`, import.meta.url), 'utf8'),
    // 64-bit values are strings in the files; a stray number past 2^53 would be wrong already.
    (key, value) => {
      if (typeof value === 'number' && !Number.isSafeInteger(value)) {
        throw new Error(`${key}: ${value} is not exact as a JSON number`);
      }
      return value;
    },
  ) as T;
}

export const vectorFile: VectorFile = readTestdata('vectors.json');

/**
 * The client's own layout for a name of the file: a preset by name, or a snowmint layout
 * built from its widths. Either way it must match the file's definition field by field.
 */
export function ours(name: string): Layout {
  const def = vectorFile.layouts[name];
  assert.ok(def, `no layout ${name} in vectors.json`);
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
