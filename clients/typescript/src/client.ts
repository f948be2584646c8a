/** The client: the endpoints, and the buffer or the shared calls behind `nextId()`. */
import { PrefetchBuffer, type BufferSettings } from './buffer.js';
import { Coalescer } from './coalescer.js';
import { EndpointPool } from './endpoints.js';
import { ClientClosedError } from './errors.js';
import { boundOf, checkToken, type Bound, type CallOptions, type ClientOptions } from './options.js';
import { SequencePrefetch, checkSequencePrefetch } from './sequences.js';
import type { Uuid } from './uuid.js';

/**
 * A client of one or several snowmint servers. IDs are `bigint`s, never `number`s.
 *
 * - A refusal (`UNAVAILABLE`: a server that cannot promise unique IDs refuses), a transport
 *   failure, or no answer within the attempt's timeout moves the call to the next endpoint,
 *   which later calls keep using; other errors reject as they are (`RejectedError`). When
 *   every attempt fails, the call rejects with the retriable `UnavailableError`; when the
 *   call's own timeout passes, with `DeadlineExceededError`.
 * - Every attempt has the client's `timeoutMs`; a caller may bound a whole call, all attempts
 *   included, with {@link CallOptions}.
 * - With a buffer, `nextId()` takes IDs prefetched in the background, refilled at the rate they
 *   are used. Without one, concurrent `nextId()` calls are coalesced: the callers waiting while
 *   a call is in flight are all served by the next one, a single `BatchIds`.
 * - `nextUuid()` and `batchUuids(n)` get UUIDv7s made from newly minted IDs, one call each
 *   (never buffered, never coalesced), with the same failover, attempts and bounds.
 * - With a `token`, every attempt carries it (`authorization: Bearer <token>`). A refusal over
 *   the tenant's quota (`RESOURCE_EXHAUSTED` with a `RetryInfo`) is waited out and tried again
 *   on the same endpoint when the call has an attempt and the time left; otherwise it rejects
 *   as it is (`RejectedError`).
 */
export class SnowmintClient {
  private readonly pool: EndpointPool;
  private readonly buffer: PrefetchBuffer | undefined;
  private readonly coalescer: Coalescer | undefined;
  private readonly prefetch: SequencePrefetch | undefined;

  /**
   * @param endpoints `host:port` or `http://host:port` for plain text, `https://host:port` for
   *   TLS; tried in order. Connections open lazily, and a buffer sends nothing before the first
   *   `nextId()`.
   * @throws TypeError for no endpoints or a malformed one
   * @throws RangeError for a setting out of its range, such as a token that is not 1 to 4,096
   *   visible ASCII characters (the message does not show it)
   */
  constructor(endpoints: string | readonly string[], options: ClientOptions = {}) {
    const addresses = typeof endpoints === 'string' ? [endpoints] : endpoints;
    if (addresses.length === 0) {
      throw new TypeError('no endpoints given');
    }
    const { timeoutMs = 1000, attempts = Math.max(2, 2 * addresses.length), buffer, tls, sequencePrefetch = 0, token } = options;
    positive('timeoutMs', timeoutMs);
    positive('attempts', attempts);
    checkSequencePrefetch(sequencePrefetch);
    if (token !== undefined) {
      checkToken(token);
    }
    let settings: BufferSettings | undefined;
    if (buffer) {
      const { batch = 4096, lowWater = 8192, maxRefills = 3, maxAgeMs = 1000 } = buffer === true ? {} : buffer;
      positive('buffer.batch', batch);
      positive('buffer.maxRefills', maxRefills);
      if (!(maxAgeMs > 0)) {
        throw new RangeError(`buffer.maxAgeMs must be positive, got ${maxAgeMs}`);
      }
      if (!Number.isInteger(lowWater) || lowWater < 0) {
        throw new RangeError(`buffer.lowWater must be a whole number, at least 0, got ${lowWater}`);
      }
      settings = { batch, lowWater, maxRefills, maxAgeMs };
    }
    this.pool = new EndpointPool(addresses, timeoutMs, attempts, tls, token);
    if (sequencePrefetch > 0) {
      this.prefetch = new SequencePrefetch(this.pool, sequencePrefetch);
    }
    if (settings) {
      this.buffer = new PrefetchBuffer(this.pool, settings);
    } else {
      this.coalescer = new Coalescer(this.pool);
    }
  }

  /**
   * One ID: from the buffer if there is one, otherwise coalesced with every other `nextId()`
   * waiting at the same moment.
   * @throws UnavailableError every attempt failed: retry later
   * @throws DeadlineExceededError the call's own timeout passed: retry later
   * @throws RejectedError the server rejected the request
   * @throws ClientClosedError after {@link close}, or when it was closed during the call
   * @throws RangeError for a `timeoutMs` that is not positive
   */
  nextId(options?: CallOptions): Promise<bigint> {
    const buffer = this.buffer;
    if (buffer !== undefined && options === undefined) {
      return buffer.nextId(boundOf(undefined));
    }
    if (this.pool.closed) {
      return Promise.reject(new ClientClosedError());
    }
    let bound: Bound;
    try {
      bound = boundOf(options);
    } catch (error) {
      return Promise.reject(error);
    }
    return buffer ? buffer.nextId(bound) : this.coalescer!.nextId(bound);
  }

  /**
   * `count` IDs, strictly increasing, from one server in one `BatchIds` call (count 1 too);
   * never from the buffer. A count the server does not accept (0, or above its maximum, 65,536
   * by default) rejects with `RejectedError` (`INVALID_ARGUMENT`), as the server answered.
   * @throws RangeError for a count that is not a whole number from 0 to 2^32 - 1
   */
  async batch(count: number, options?: CallOptions): Promise<bigint[]> {
    if (!Number.isInteger(count) || count < 0 || count > 0xffff_ffff) {
      throw new RangeError(`count must be a whole number from 0 to 2^32 - 1, got ${count}`);
    }
    if (this.pool.closed) {
      throw new ClientClosedError();
    }
    return this.pool.batch(count, boundOf(options));
  }

  /**
   * One UUIDv7, made from one newly minted ID: unique fleet-wide as the ID is. One `NextUuid`
   * call, failing over as `nextId()` does; never from the buffer, never shared with other
   * callers. {@link decodeUuid} reads the ID back from it.
   * @throws UnavailableError every attempt failed: retry later
   * @throws DeadlineExceededError the call's own timeout passed: retry later
   * @throws RejectedError the server rejected the request, or its answer was malformed
   *   (`INTERNAL`: not 16 bytes)
   * @throws ClientClosedError after {@link close}, or when it was closed during the call
   * @throws RangeError for a `timeoutMs` that is not positive
   */
  async nextUuid(options?: CallOptions): Promise<Uuid> {
    if (this.pool.closed) {
      throw new ClientClosedError();
    }
    return this.pool.nextUuid(boundOf(options));
  }

  /**
   * `count` UUIDv7s, strictly increasing, from one server in one `BatchUuids` call (count 1
   * too), with the failover of {@link batch}. A count the server does not accept (0, or above
   * its maximum, 65,536 by default) rejects with `RejectedError` (`INVALID_ARGUMENT`), as the
   * server answered.
   * @throws RangeError for a count that is not a whole number from 0 to 2^32 - 1
   */
  async batchUuids(count: number, options?: CallOptions): Promise<Uuid[]> {
    if (!Number.isInteger(count) || count < 0 || count > 0xffff_ffff) {
      throw new RangeError(`count must be a whole number from 0 to 2^32 - 1, got ${count}`);
    }
    if (this.pool.closed) {
      throw new ClientClosedError();
    }
    return this.pool.batchUuids(count, boundOf(options));
  }

  /**
   * The next value of the named sequence `name`: positive, never issued twice, as a `bigint`.
   * One `NextValue` call; with `sequencePrefetch`, from the sequence's buffer when it holds one
   * (an unordered sequence's buffer is refilled by one `BatchValues`, shared by the callers
   * waiting; an ordered sequence is never buffered). It fails over and keeps deadlines as
   * {@link batch} does; `NOT_FOUND` (no such sequence) and `OUT_OF_RANGE` (used up) reject with
   * `RejectedError`, as the server answered. A value that is not positive rejects with
   * `RejectedError` (`INTERNAL`).
   */
  async nextValue(name: string, options?: CallOptions): Promise<bigint> {
    if (this.pool.closed) {
      throw new ClientClosedError();
    }
    if (this.prefetch) {
      return this.prefetch.nextValue(name, boundOf(options));
    }
    return (await this.pool.nextValue(name, boundOf(options))).values[0]!;
  }

  /**
   * `count` values of the named sequence `name`, increasing, from one server in one
   * `BatchValues` call, with the failover of {@link batch}. Values not positive and
   * increasing, or another count than asked, reject with `RejectedError` (`INTERNAL`).
   * @throws RangeError for a count that is not a whole number from 0 to 2^32 - 1
   */
  async batchValues(name: string, count: number, options?: CallOptions): Promise<bigint[]> {
    if (!Number.isInteger(count) || count < 0 || count > 0xffff_ffff) {
      throw new RangeError(`count must be a whole number from 0 to 2^32 - 1, got ${count}`);
    }
    if (this.pool.closed) {
      throw new ClientClosedError();
    }
    return (await this.pool.batchValues(name, count, boundOf(options))).values;
  }

  /**
   * Ends the client at once: the buffer stops refilling, every call waiting on the client (on
   * an empty buffer, on a shared call, or in an attempt on a server) rejects with
   * `ClientClosedError`, the connections close, and every later call rejects with it too.
   * Buffered IDs and sequence values are dropped, never handed out (a gap). Calling it again
   * does nothing.
   */
  close(): void {
    this.buffer?.close();
    this.pool.close();
  }
}

function positive(name: string, value: number): void {
  if (!Number.isInteger(value) || value < 1) {
    throw new RangeError(`${name} must be a whole number, at least 1, got ${value}`);
  }
}
