/**
 * The TypeScript client of snowmint, a service that mints unique, roughly time-sorted 64-bit
 * IDs. {@link SnowmintClient} gets IDs (failover across endpoints, an optional prefetch
 * buffer); {@link decode} reads them, and other systems' IDs, without a server. Every ID is a
 * `bigint`.
 */
export { SnowmintClient, type BufferOptions, type ClientOptions } from './client.js';
export { ClientClosedError, RejectedError, SnowmintError, UnavailableError } from './errors.js';
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
