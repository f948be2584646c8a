/**
 * UUIDv7s (RFC 9562) made from snowmint IDs: the value type, its text form, and local
 * decoding back to the ID it was made from, with no server.
 *
 * A snowmint UUID is made from one ID the server minted, so it is as unique as the ID (the
 * random tail promises nothing, it only makes neighbours unguessable). Its 128 bits, most
 * significant first (bit 127 is the top bit of `bytes[0]`):
 *
 * | bits    | field |
 * |---------|-------|
 * | 127..80 | the Unix millisecond at which the ID's tick starts (48 bits) |
 * | 79..76  | the version, 7 |
 * | 75..64  | the top 12 bits of the 42-bit minted field, `slot << 22 \| sequence` |
 * | 63..62  | the variant, binary 10 |
 * | 61..32  | the low 30 bits of the minted field |
 * | 31..0   | random |
 *
 * So UUIDs sort (as bytes, as numbers, and as their lower-case text) in the order their IDs
 * were minted by one server: a batch's are strictly increasing.
 */
import { namedLayout, pack, type Layout, type LayoutName } from './layout.js';

/** The length of a UUID's text form: 32 hex digits and 4 hyphens. */
export const UUID_TEXT_LENGTH = 36;

/**
 * Why a text or a UUID was refused, as the shared test vectors name it: `text`, not the text
 * form of a UUID; and, decoding, in the order checked: `version`, not version 7; `variant`,
 * not the RFC 9562 variant (binary 10); `fields`, a slot or sequence too wide for the layout;
 * `tick`, a time that is not the start of one of the layout's ticks, or outside its range.
 */
export type UuidErrorKind = 'text' | 'version' | 'variant' | 'fields' | 'tick';

/** Not a UUID's text form, or not a UUID snowmint minted with the layout; `kind` says why. */
export class UuidError extends Error {
  constructor(
    readonly kind: UuidErrorKind,
    message: string,
  ) {
    super(message);
    this.name = 'UuidError';
  }
}

const HEX = Array.from({ length: 256 }, (_, b) => b.toString(16).padStart(2, '0'));

/**
 * A UUID: 16 bytes, most significant first. Immutable: it keeps its own copy of the bytes,
 * and {@link bytes} hands out a copy. Equal UUIDs are {@link equals}, not `===`; {@link compare}
 * orders them as their bytes, which is also the order of their numbers and of their text.
 */
export class Uuid {
  readonly #bytes: Uint8Array;
  #text: string | undefined;

  /**
   * The UUID of these 16 bytes (copied), most significant first.
   * @throws RangeError for any other number of bytes
   */
  constructor(bytes: Uint8Array) {
    if (!(bytes instanceof Uint8Array) || bytes.length !== 16) {
      const got = bytes instanceof Uint8Array ? `${bytes.length} bytes` : String(bytes);
      throw new RangeError(`a UUID is 16 bytes, got ${got}`);
    }
    this.#bytes = new Uint8Array(bytes);
  }

  /** Reads a UUID's text form strictly; see {@link parseUuid}. */
  static parse(text: string): Uuid {
    return parseUuid(text);
  }

  /** Orders two UUIDs as their bytes (and so their numbers and text): for `Array.prototype.sort`. */
  static compare(a: Uuid, b: Uuid): number {
    return a.compare(b);
  }

  /** A copy of the 16 bytes, most significant first. */
  get bytes(): Uint8Array {
    return new Uint8Array(this.#bytes);
  }

  /** The version: the top four bits of byte 6 (7 for every UUID snowmint mints). */
  get version(): number {
    return this.#bytes[6]! >> 4;
  }

  /** Negative, zero or positive as this UUID sorts before, with or after `other`. */
  compare(other: Uuid): number {
    const a = this.#bytes;
    const b = other.#bytes;
    for (let i = 0; i < 16; i++) {
      if (a[i] !== b[i]) {
        return a[i]! < b[i]! ? -1 : 1;
      }
    }
    return 0;
  }

  /** Whether `other` is the same UUID (the same 16 bytes). */
  equals(other: Uuid): boolean {
    return other instanceof Uuid && this.compare(other) === 0;
  }

  /** The canonical text form: lower-case hex digits in groups of 8-4-4-4-12. */
  toString(): string {
    if (this.#text === undefined) {
      const h = Array.from(this.#bytes, (b) => HEX[b]!);
      this.#text = `${h.slice(0, 4).join('')}-${h.slice(4, 6).join('')}-${h.slice(6, 8).join('')}-${h.slice(8, 10).join('')}-${h.slice(10).join('')}`;
    }
    return this.#text;
  }

  /** The text form, so `JSON.stringify` writes a UUID as its string. */
  toJSON(): string {
    return this.toString();
  }
}

/** The canonical text form of a UUID (or of its 16 bytes): lower case, 8-4-4-4-12. */
export function formatUuid(uuid: Uuid | Uint8Array): string {
  return (uuid instanceof Uuid ? uuid : new Uuid(uuid)).toString();
}

/** The value of one hex digit's character code, of either case, or -1. */
function hexDigit(code: number): number {
  if (code >= 0x30 && code <= 0x39) return code - 0x30; // 0-9
  if (code >= 0x61 && code <= 0x66) return code - 0x57; // a-f
  if (code >= 0x41 && code <= 0x46) return code - 0x37; // A-F
  return -1;
}

/**
 * Reads a UUID's text form, strictly, as the server does: exactly 36 characters, hex digits of
 * either case in groups of 8-4-4-4-12, with a hyphen at indexes 8, 13, 18 and 23 and nothing
 * else: no braces, no `urn:uuid:`, no spaces, not the 32-digit form.
 * @throws UuidError of kind `text` for anything else
 */
export function parseUuid(text: string): Uuid {
  const refuse = (reason: string) => {
    const shown = typeof text === 'string' ? JSON.stringify(text.slice(0, 64)) : String(text);
    return new UuidError('text', `${shown} is not a UUID's text form (36 characters: hex digits in groups of 8-4-4-4-12): ${reason}`);
  };
  if (typeof text !== 'string') {
    throw refuse('not a string');
  }
  if (text.length !== UUID_TEXT_LENGTH) {
    throw refuse(`${text.length} character${text.length === 1 ? '' : 's'}, not 36`);
  }
  const bytes = new Uint8Array(16);
  let n = 0;
  for (let i = 0; i < UUID_TEXT_LENGTH; i++) {
    const code = text.charCodeAt(i);
    if (i === 8 || i === 13 || i === 18 || i === 23) {
      if (code !== 0x2d) {
        throw refuse(`character ${i + 1} is not the hyphen after a group`);
      }
      continue;
    }
    const digit = hexDigit(code);
    if (digit < 0) {
      throw refuse(`character ${i + 1} is not a hex digit`);
    }
    bytes[n >> 1] = (bytes[n >> 1]! << 4) | digit;
    n++;
  }
  return new Uuid(bytes);
}

/** What a snowmint UUID carries. */
export interface DecodedUuid {
  readonly uuid: Uuid;
  /** The 64-bit ID the UUID was made from, in the layout's packing. */
  readonly id: bigint;
  /** The UUID's time field: the Unix millisecond at which the ID's tick starts. */
  readonly unixMs: bigint;
  /** The ID's time field: ticks since the layout's epoch. */
  readonly tick: bigint;
  /** The worker slot that minted it (the ID's worker field). */
  readonly slot: number;
  /** The counter within its tick (the ID's sequence field). */
  readonly sequence: number;
  /** The random low 32 bits, 0 to 2^32 - 1. */
  readonly random: number;
  /** `unixMs` as RFC 3339 in UTC with milliseconds, e.g. `2026-01-01T00:00:00.001Z`. */
  readonly time: string;
  /** The layout it was read with. */
  readonly layout: Layout;
}

const MINTED_LOW_BITS = 30n;
const SEQUENCE_FIELD_BITS = 22n;

const mask = (bits: number | bigint): bigint => (1n << BigInt(bits)) - 1n;

/**
 * Reads the ID a snowmint UUIDv7 was made from, and its parts, with `layout` (snowmint's
 * default layout unless given; a name or a {@link Layout}): that of the server that minted it.
 * A string is read with {@link parseUuid} first.
 * @throws UuidError of kind, in the order checked: `text` (a string that is not a UUID),
 *   `version` (not version 7), `variant` (not binary 10), `fields` (a slot or sequence too
 *   wide for the layout's worker or sequence field), `tick` (a time before the layout's epoch,
 *   between two of its ticks, or past its last)
 */
export function decodeUuid(uuid: Uuid | string, layoutOrName: Layout | LayoutName = 'snowmint'): DecodedUuid {
  const l = typeof layoutOrName === 'string' ? namedLayout(layoutOrName) : layoutOrName;
  const value = typeof uuid === 'string' ? parseUuid(uuid) : uuid;
  if (!(value instanceof Uuid)) {
    throw new TypeError(`not a Uuid: ${String(uuid)}`);
  }
  const view = new DataView(value.bytes.buffer);
  const high = view.getBigUint64(0);
  const low = view.getBigUint64(8);
  const version = Number((high >> 12n) & 0xfn);
  if (version !== 7) {
    throw new UuidError('version', `${value} is not a UUIDv7: its version is ${version}`);
  }
  const variant = Number(low >> 62n);
  if (variant !== 0b10) {
    throw new UuidError('variant', `${value} is not an RFC 9562 UUID: its variant bits are 0b${variant.toString(2).padStart(2, '0')}, not 0b10`);
  }
  const unixMs = high >> 16n;
  const minted = ((high & 0xfffn) << MINTED_LOW_BITS) | ((low >> 32n) & mask(MINTED_LOW_BITS));
  const slot = minted >> SEQUENCE_FIELD_BITS;
  const sequence = minted & mask(SEQUENCE_FIELD_BITS);
  if (slot > mask(l.workerBits) || sequence > mask(l.sequenceBits)) {
    throw new UuidError(
      'fields',
      `${value} was not minted by snowmint with layout ${l.name}: its slot ${slot} or sequence ${sequence} does not fit the layout's fields`,
    );
  }
  const since = unixMs - BigInt(l.epochMs);
  const tickMs = BigInt(l.tickMs);
  const tick = since >= 0n ? since / tickMs : -1n;
  if (tick < 0n || since % tickMs !== 0n || tick > mask(l.timeBits)) {
    throw new UuidError(
      'tick',
      `${value} was not minted by snowmint with layout ${l.name}: its time ${unixMs} is not the start of one of the layout's ticks`,
    );
  }
  const id = pack(l, tick, slot, sequence);
  return {
    uuid: value,
    id,
    unixMs,
    tick,
    slot: Number(slot),
    sequence: Number(sequence),
    random: Number(low & 0xffff_ffffn),
    time: new Date(Number(unixMs)).toISOString(),
    layout: l,
  };
}
