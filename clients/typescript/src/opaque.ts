/**
 * The string form of opaque IDs, read and written with no key.
 *
 * A server started with `--opaque-key-file` hands out opaque IDs: the ID put through a keyed
 * permutation (a value below 2^63) and the version of the key (0 to 31). Only the server's key
 * maps one back to its ID; the string form, 14 characters of Crockford base32 (the key version,
 * then the value in 13 characters, most significant first), needs none. Values are unique per
 * key version; strings carry the version, so they stay unique across key rotations.
 */

/** Crockford's base32: digits and capitals without I, L, O and U. */
export const OPAQUE_ALPHABET = '0123456789ABCDEFGHJKMNPQRSTVWXYZ';

/** The length of the string form: a key version and 13 characters of value. */
export const OPAQUE_TEXT_LENGTH = 14;

const VALUE_LIMIT = 1n << 63n;

/** An opaque ID: its key version and its value (a `bigint`, as every 64-bit value here). */
export interface OpaqueId {
  readonly keyVersion: number;
  readonly value: bigint;
}

/**
 * Why a string or a pair is not an opaque ID, as the shared test vectors name it: a character
 * outside Crockford base32, a length other than 14, a value of 2^63 or more, a key version
 * outside 0 to 31.
 */
export type OpaqueErrorKind = 'character' | 'length' | 'range' | 'version';

/** Not an opaque ID; `kind` says why. */
export class OpaqueIdError extends Error {
  constructor(
    readonly kind: OpaqueErrorKind,
    message: string,
  ) {
    super(message);
    this.name = 'OpaqueIdError';
  }
}

/** The opaque ID of `value` under `keyVersion`, both checked. */
export function opaqueId(keyVersion: number, value: bigint): OpaqueId {
  if (!Number.isInteger(keyVersion) || keyVersion < 0 || keyVersion > 31) {
    throw new OpaqueIdError('version', `key version ${keyVersion} is not between 0 and 31`);
  }
  if (value < 0n || value >= VALUE_LIMIT) {
    throw new OpaqueIdError('range', `${value} is not a 63-bit value: opaque values are below 2^63`);
  }
  return { keyVersion, value };
}

/** The string form of `opaque`: 14 characters of Crockford base32. */
export function formatOpaqueId(opaque: OpaqueId): string {
  const { keyVersion, value } = opaqueId(opaque.keyVersion, opaque.value);
  let text = OPAQUE_ALPHABET[keyVersion]!;
  for (let shift = 60n; shift >= 0n; shift -= 5n) {
    text += OPAQUE_ALPHABET[Number((value >> shift) & 31n)]!;
  }
  return text;
}

/** The value of one character, with its aliases (lower case, O for 0, I and L for 1), or -1. */
function symbol(c: string): number {
  const upper = c.length === 1 && c.charCodeAt(0) < 128 ? c.toUpperCase() : '';
  if (upper === 'O') return 0;
  if (upper === 'I' || upper === 'L') return 1;
  return upper === '' ? -1 : OPAQUE_ALPHABET.indexOf(upper);
}

/**
 * Reads a string form. Lower case reads as upper case, O as 0, I and L as 1, and hyphens
 * anywhere are ignored; then, in this order, any other character, a length other than 14
 * without hyphens, and a value of 2^63 or more throw an {@link OpaqueIdError}.
 */
export function parseOpaqueId(text: string): OpaqueId {
  const symbols: number[] = [];
  let at = 0;
  for (const c of text) {
    at += 1;
    if (c === '-') continue;
    const s = symbol(c);
    if (s < 0) {
      const shown = JSON.stringify(text);
      throw new OpaqueIdError('character', `opaque ID ${shown}: '${c}' (character ${at}) is not Crockford base32`);
    }
    symbols.push(s);
  }
  if (symbols.length !== OPAQUE_TEXT_LENGTH) {
    throw new OpaqueIdError(
      'length',
      `opaque ID ${JSON.stringify(text)} has ${symbols.length} characters without its hyphens, not 14`,
    );
  }
  if (symbols[1]! >= 8) {
    throw new OpaqueIdError('range', `opaque ID ${JSON.stringify(text)} holds a value of 2^63 or more`);
  }
  let value = 0n;
  for (const s of symbols.slice(1)) {
    value = (value << 5n) | BigInt(s);
  }
  return { keyVersion: symbols[0]!, value };
}
