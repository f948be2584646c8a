/**
 * The TypeScript client of snowmint, a service that mints unique, roughly time-sorted 64-bit
 * IDs, and UUIDv7s made from them. {@link SnowmintClient} gets IDs (failover across endpoints,
 * an optional prefetch buffer) and UUIDs; {@link decode} reads IDs, and other systems' IDs,
 * without a server; {@link parseUuid}, {@link formatUuid} and {@link decodeUuid} read and write
 * UUIDs' text form and read back the ID a UUID was made from; {@link parseOpaqueId} and
 * {@link formatOpaqueId} read and write the string form of opaque IDs, with no key. Every ID is
 * a `bigint`. Nothing is read from disk at import.
 */
export { SnowmintClient } from './client.js';
export type { BufferOptions, CallOptions, ClientOptions, TlsOptions } from './options.js';
export { MAX_SEQUENCE_PREFETCH } from './sequences.js';
export {
  ClientClosedError,
  DeadlineExceededError,
  RejectedError,
  SnowmintError,
  UnavailableError,
  type LastAttempt,
} from './errors.js';
export {
  DEFAULT_EPOCH_MS,
  LAYOUT_NAMES,
  decode,
  layout,
  namedLayout,
  snowmintLayout,
  type DecodedId,
  type FieldOrder,
  type Layout,
  type LayoutName,
} from './layout.js';
export {
  OPAQUE_ALPHABET,
  OPAQUE_TEXT_LENGTH,
  OpaqueIdError,
  formatOpaqueId,
  opaqueId,
  parseOpaqueId,
  type OpaqueErrorKind,
  type OpaqueId,
} from './opaque.js';
export {
  UUID_TEXT_LENGTH,
  Uuid,
  UuidError,
  decodeUuid,
  formatUuid,
  parseUuid,
  type DecodedUuid,
  type UuidErrorKind,
} from './uuid.js';
