/**
 * The TypeScript client of snowmint, a service that mints unique, roughly time-sorted 64-bit
 * IDs. {@link SnowmintClient} gets IDs (failover across endpoints, an optional prefetch
 * buffer); {@link decode} reads them, and other systems' IDs, without a server;
 * {@link parseOpaqueId} and {@link formatOpaqueId} read and write the string form of opaque
 * IDs, with no key. Every ID is a `bigint`. Nothing is read from disk at import.
 */
export { SnowmintClient } from './client.js';
export type { BufferOptions, CallOptions, ClientOptions, TlsOptions } from './options.js';
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
