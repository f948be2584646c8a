/**
 * ID layouts and local decoding: an ID carries its time, worker and sequence, so reading them
 * needs no server, only the layout. Every 64-bit value is a `bigint`: a JavaScript `number`
 * loses precision past 2^53, and every current snowmint ID is past it.
 */

/** The order of the two fields below the time field. */
export type FieldOrder = 'worker_sequence' | 'sequence_worker';

/**
 * An ID layout. Fields run most significant first: time, then worker and sequence in `order`.
 * Bits above the three fields must be zero (for snowmint's 63-bit layouts: the sign bit).
 */
export interface Layout {
  /** `snowmint` for snowmint's own layouts, or a preset's name. */
  readonly name: string;
  /** Unix milliseconds at which tick 0 starts. */
  readonly epochMs: number;
  /** The length of one tick in milliseconds. */
  readonly tickMs: number;
  readonly timeBits: number;
  readonly workerBits: number;
  readonly sequenceBits: number;
  readonly order: FieldOrder;
}

/** The fields of one ID. */
export interface DecodedId {
  readonly id: bigint;
  /** The start of the ID's tick, in Unix milliseconds. */
  readonly unixMs: bigint;
  /** The time field: ticks since the layout's epoch. */
  readonly tick: bigint;
  /** The worker (or shard, or machine) that minted it. */
  readonly workerId: number;
  /** The counter within its tick. */
  readonly sequence: number;
  /** The ID's time as RFC 3339 in UTC with milliseconds, e.g. `2026-01-01T00:00:00.001Z`. */
  readonly time: string;
  /** The layout it was read with. */
  readonly layout: Layout;
}

/** The names {@link namedLayout} accepts. */
export const LAYOUT_NAMES = ['snowmint', 'twitter', 'discord', 'instagram', 'sonyflake'] as const;
export type LayoutName = (typeof LAYOUT_NAMES)[number];

/** snowmint's default epoch, 2026-01-01T00:00:00Z, in Unix milliseconds. */
export const DEFAULT_EPOCH_MS = 1_767_225_600_000;

/**
 * Checks a layout's widths and returns it frozen, so that every layout that exists can decode.
 * @throws RangeError naming what is out of range
 */
export function layout(fields: Layout): Layout {
  const { name, epochMs, tickMs, timeBits, workerBits, sequenceBits, order } = fields;
  if (!Number.isSafeInteger(epochMs)) {
    throw new RangeError(`layout ${name}: the epoch must be an integer number of ms, got ${epochMs}`);
  }
  if (!Number.isSafeInteger(tickMs) || tickMs < 1) {
    throw new RangeError(`layout ${name}: the tick must be a whole number of ms, at least 1, got ${tickMs}`);
  }
  const width = (bits: number, min: number, max: number) => Number.isInteger(bits) && bits >= min && bits <= max;
  if (!width(timeBits, 1, 64) || !width(workerBits, 0, 32) || !width(sequenceBits, 0, 32)) {
    throw new RangeError(
      `layout ${name}: widths out of range: time ${timeBits} (at least 1), ` +
        `worker ${workerBits} and sequence ${sequenceBits} (0 to 32 each)`,
    );
  }
  if (timeBits + workerBits + sequenceBits > 64) {
    throw new RangeError(
      `layout ${name}: time, worker and sequence bits must fit 64 bits, got ${timeBits} + ${workerBits} + ${sequenceBits}`,
    );
  }
  if (order !== 'worker_sequence' && order !== 'sequence_worker') {
    throw new RangeError(`layout ${name}: order must be worker_sequence or sequence_worker, got ${String(order)}`);
  }
  return Object.freeze({ name, epochMs, tickMs, timeBits, workerBits, sequenceBits, order });
}

/**
 * A snowmint layout as configured on the server (`--epoch`, `--worker-bits`,
 * `--sequence-bits`): 1 ms ticks, and the time field takes the rest of the 63 bits. With no
 * argument, the default: epoch 2026-01-01, 41 bits of ms, 10 of worker, 12 of sequence.
 */
export function snowmintLayout(options: { epochMs?: number; workerBits?: number; sequenceBits?: number } = {}): Layout {
  const { epochMs = DEFAULT_EPOCH_MS, workerBits = 10, sequenceBits = 12 } = options;
  return layout({
    name: 'snowmint',
    epochMs,
    tickMs: 1,
    timeBits: 63 - workerBits - sequenceBits,
    workerBits,
    sequenceBits,
    order: 'worker_sequence',
  });
}

const PRESETS: Record<Exclude<LayoutName, 'snowmint'>, Layout> = {
  twitter: layout({ name: 'twitter', epochMs: 1_288_834_974_657, tickMs: 1, timeBits: 41, workerBits: 10, sequenceBits: 12, order: 'worker_sequence' }),
  // The 5-bit worker and 5-bit process, read together as one 10-bit worker.
  discord: layout({ name: 'discord', epochMs: 1_420_070_400_000, tickMs: 1, timeBits: 42, workerBits: 10, sequenceBits: 12, order: 'worker_sequence' }),
  // The 13-bit logical shard as the worker.
  instagram: layout({ name: 'instagram', epochMs: 1_314_220_021_721, tickMs: 1, timeBits: 41, workerBits: 13, sequenceBits: 10, order: 'worker_sequence' }),
  // Start 2014-09-01T00:00:00Z, 10 ms units, the 8-bit sequence above the 16-bit machine ID.
  sonyflake: layout({ name: 'sonyflake', epochMs: 1_409_529_600_000, tickMs: 10, timeBits: 39, workerBits: 16, sequenceBits: 8, order: 'sequence_worker' }),
};

const DEFAULT_LAYOUT = snowmintLayout();

/**
 * A layout by name: `snowmint` (the default) or another system's, to read its IDs.
 * @throws RangeError for an unknown name, listing the known ones
 */
export function namedLayout(name: string): Layout {
  if (name === 'snowmint') {
    return DEFAULT_LAYOUT;
  }
  const preset = Object.hasOwn(PRESETS, name) ? PRESETS[name as keyof typeof PRESETS] : undefined;
  if (preset === undefined) {
    throw new RangeError(`unknown layout ${JSON.stringify(name)}; known layouts: ${LAYOUT_NAMES.join(', ')}`);
  }
  return preset;
}

const mask = (bits: number): bigint => (1n << BigInt(bits)) - 1n;

/**
 * Splits an ID into its time, worker and sequence, with `layout` (snowmint's default layout
 * unless given; a name or a {@link Layout}).
 * @throws RangeError when the ID is not an unsigned 64-bit value, or has bits set above the
 *   layout's fields, so it cannot be an ID of this layout
 */
export function decode(id: bigint, layoutOrName: Layout | LayoutName = DEFAULT_LAYOUT): DecodedId {
  const l = typeof layoutOrName === 'string' ? namedLayout(layoutOrName) : layoutOrName;
  if (typeof id !== 'bigint' || id < 0n || id > mask(64)) {
    throw new RangeError(`id ${String(id)} is not an unsigned 64-bit bigint`);
  }
  const total = l.timeBits + l.workerBits + l.sequenceBits;
  if (id >> BigInt(total) !== 0n) {
    throw new RangeError(`id ${id} has bits set above the ${total} bits of layout ${l.name}`);
  }
  const workerShift = l.order === 'worker_sequence' ? l.sequenceBits : 0;
  const sequenceShift = l.order === 'worker_sequence' ? 0 : l.workerBits;
  const tick = (id >> BigInt(l.workerBits + l.sequenceBits)) & mask(l.timeBits);
  const workerId = Number((id >> BigInt(workerShift)) & mask(l.workerBits));
  const sequence = Number((id >> BigInt(sequenceShift)) & mask(l.sequenceBits));
  const unixMs = BigInt(l.epochMs) + tick * BigInt(l.tickMs);
  return { id, unixMs, tick, workerId, sequence, time: rfc3339(unixMs), layout: l };
}

/**
 * The ID of `tick`, `workerId` and `sequence` (each within its field) in `layout`: the reverse
 * of {@link decode}, with the fields in the layout's order.
 */
export function pack(l: Layout, tick: bigint, workerId: bigint, sequence: bigint): bigint {
  const [workerShift, sequenceShift] = l.order === 'worker_sequence' ? [l.sequenceBits, 0] : [0, l.workerBits];
  return (tick << BigInt(l.workerBits + l.sequenceBits)) | (workerId << BigInt(workerShift)) | (sequence << BigInt(sequenceShift));
}

/** The largest time a JavaScript `Date` holds, in ms either side of the Unix epoch. */
const MAX_DATE_MS = 8_640_000_000_000_000n;

/** RFC 3339 with milliseconds, as the server writes it; the raw number past `Date`'s range. */
function rfc3339(unixMs: bigint): string {
  if (unixMs > MAX_DATE_MS || unixMs < -MAX_DATE_MS) {
    return `${unixMs} ms since the Unix epoch`;
  }
  return new Date(Number(unixMs)).toISOString();
}
