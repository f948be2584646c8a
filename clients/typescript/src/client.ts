import { Client, Metadata, credentials, status as Status, type ServiceError } from '@grpc/grpc-js';
import { setTimeout as sleep } from 'node:timers/promises';

import { ClientClosedError, RejectedError, UnavailableError } from './errors.js';
import { idService } from './proto.js';

/** The local buffer's settings; each defaults to the Rust client's. */
export interface BufferOptions {
  /** IDs asked for per refill (one `BatchIds` call). Default 4096. */
  batch?: number;
  /** A refill starts when fewer IDs than this are buffered or on their way. Default 8192. */
  lowWater?: number;
  /** Refills in flight at once, to keep up with heavy use. Default 3. */
  maxRefills?: number;
  /**
   * A buffered batch older than this (ms) is dropped unused, so the IDs a process hands out
   * stay roughly time-sorted. Dropped IDs are gaps, never duplicates. Default 1000.
   */
  maxAgeMs?: number;
}

export interface ClientOptions {
  /**
   * The deadline of each call to a server, in ms (default 1000). A server that cannot mint
   * in time refuses before it passes, so the call can move on to the next endpoint.
   */
  deadlineMs?: number;
  /**
   * How many calls one request may make across endpoints before it fails (default: twice the
   * number of endpoints, at least 2), so every endpoint gets a second chance after a pause.
   */
  attempts?: number;
  /** Prefetch IDs into a local buffer (`true` for the defaults), so most `nextId()` calls need no round trip. */
  buffer?: BufferOptions | boolean;
}

/**
 * Codes after which another endpoint may succeed: a refusal (`UNAVAILABLE`), or the call's
 * fate unknown because of the transport or the deadline. A lost reply costs unused IDs, never
 * duplicates, so trying again is always safe.
 */
const RETRIABLE = new Set([Status.UNAVAILABLE, Status.DEADLINE_EXCEEDED, Status.UNKNOWN, Status.CANCELLED]);

/** The most IDs one coalesced call asks for: the server's default `--max-batch`. */
const MAX_PER_CALL = 65_536;

interface Endpoint {
  url: string;
  client: Client;
}

/** `http://host:port` (plain text) or `https://host:port` (TLS) to a gRPC client. */
function connect(url: string): Endpoint {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    parsed = new URL('invalid:');
  }
  const secure = parsed.protocol === 'https:';
  if ((parsed.protocol !== 'http:' && !secure) || parsed.port === '' || parsed.hostname === '') {
    throw new TypeError(`invalid endpoint ${JSON.stringify(url)}: expected http://host:port or https://host:port`);
  }
  const creds = secure ? credentials.createSsl() : credentials.createInsecure();
  return { url, client: new Client(parsed.host, creds) };
}

/**
 * The connections, and which one to use next. A call that is refused or fails in transport
 * moves to the next endpoint, and later calls stay there; other errors return as they are.
 */
class EndpointPool {
  private readonly endpoints: Endpoint[];
  /** Index of the endpoint to try first. */
  private current = 0;
  closed = false;

  constructor(
    urls: readonly string[],
    private readonly deadlineMs: number,
    private readonly attempts: number,
  ) {
    const endpoints: Endpoint[] = [];
    try {
      for (const url of urls) {
        endpoints.push(connect(url));
      }
    } catch (error) {
      endpoints.forEach((e) => e.client.close());
      throw error;
    }
    this.endpoints = endpoints;
  }

  /** `count` IDs from one server (`NextId` for one, `BatchIds` for more), failing over. */
  async fetch(count: number): Promise<bigint[]> {
    const n = this.endpoints.length;
    let last: { url: string; error: ServiceError } | undefined;
    for (let attempt = 0; attempt < this.attempts; attempt++) {
      if (this.closed) {
        throw new ClientClosedError();
      }
      const index = this.current;
      const endpoint = this.endpoints[index]!;
      try {
        return await this.call(endpoint, count);
      } catch (e) {
        const error = e as ServiceError;
        if (!RETRIABLE.has(error.code)) {
          throw new RejectedError(
            `the server at ${endpoint.url} rejected the request: ${describe(error)}`,
            error.code,
            error.details,
          );
        }
        if (this.current === index) {
          this.current = (index + 1) % n; // unless another call already moved on
        }
        last = { url: endpoint.url, error };
        const next = attempt + 1;
        if (next < this.attempts && next % n === 0) {
          // Every endpoint tried once more: back off a little before going round again.
          await sleep(10 * 2 ** Math.min(next / n - 1, 5));
        }
      }
    }
    const { url, error } = last!;
    throw new UnavailableError(
      `every endpoint refused or failed (${this.attempts} attempts over ${n} endpoints); last, ${url}: ${describe(error)}`,
      error.code,
      error.details,
    );
  }

  private call(endpoint: Endpoint, count: number): Promise<bigint[]> {
    const options = { deadline: Date.now() + this.deadlineMs };
    return new Promise((resolve, reject) => {
      if (count === 1) {
        const { path, requestSerialize, responseDeserialize } = idService.NextId;
        endpoint.client.makeUnaryRequest(path, requestSerialize, responseDeserialize, {}, new Metadata(), options,
          (error, response) => (error || !response ? reject(error) : resolve([BigInt(response.id)])));
        return;
      }
      const { path, requestSerialize, responseDeserialize } = idService.BatchIds;
      endpoint.client.makeUnaryRequest(path, requestSerialize, responseDeserialize, { count }, new Metadata(), options,
        (error, response) => {
          if (error || !response) {
            reject(error);
          } else if (response.ids.length !== count) {
            // Callers are promised one ID each: a short reply must fail them, not strand them.
            reject(Object.assign(new Error(`asked for ${count} IDs, got ${response.ids.length}`), {
              code: Status.INTERNAL,
              details: `asked for ${count} IDs, got ${response.ids.length}`,
            }));
          } else {
            resolve(response.ids.map((id) => BigInt(id)));
          }
        });
    });
  }

  close(): void {
    this.closed = true;
    for (const endpoint of this.endpoints) {
      endpoint.client.close();
    }
  }
}

function describe(error: ServiceError): string {
  return `${Status[error.code] ?? error.code}: ${error.details || error.message}`;
}

/** A caller waiting for one ID. */
interface Waiter {
  resolve(id: bigint): void;
  reject(error: unknown): void;
}

/**
 * Serves unbuffered `nextId()` calls: every caller waiting while a call is in flight is served
 * by the next call, one `BatchIds` for all of them.
 */
class Coalescer {
  private waiting: Waiter[] = [];
  private fetching = false;

  constructor(private readonly pool: EndpointPool) {}

  nextId(): Promise<bigint> {
    return new Promise((resolve, reject) => {
      this.waiting.push({ resolve, reject });
      if (!this.fetching) {
        this.fetching = true;
        // After the current task: callers asking in the same burst share the first call too.
        queueMicrotask(() => void this.fetchForWaiting());
      }
    });
  }

  private async fetchForWaiting(): Promise<void> {
    while (this.waiting.length > 0) {
      const callers = this.waiting.splice(0, MAX_PER_CALL);
      try {
        const ids = await this.pool.fetch(callers.length);
        callers.forEach((caller, i) => caller.resolve(ids[i]!));
      } catch (error) {
        callers.forEach((caller) => caller.reject(error));
      }
    }
    this.fetching = false;
  }
}

/** One fetched batch, handed out from `next` on. */
interface Batch {
  ids: bigint[];
  next: number;
  /** When it arrived, on the monotonic clock (ms). */
  arrived: number;
}

/**
 * The local buffer of prefetched IDs. Every ID leaves it once: handed to one caller, or
 * dropped with its batch. Refills are driven by demand: after a failed refill nothing is
 * fetched until a caller asks again.
 */
class PrefetchBuffer {
  /** Oldest first: batches are appended as they arrive. */
  private readonly batches: Batch[] = [];
  private readonly waiting: Waiter[] = [];
  private buffered = 0;
  private refilling = 0;
  /** Calls served from the buffer since the last yield to the event loop. */
  private sinceYield = 0;

  constructor(
    private readonly pool: EndpointPool,
    private readonly batch: number,
    private readonly lowWater: number,
    private readonly maxRefills: number,
    private readonly maxAgeMs: number,
  ) {
    this.startRefills();
  }

  async nextId(): Promise<bigint> {
    const id = this.take(performance.now());
    this.startRefills();
    if (id === undefined) {
      return new Promise((resolve, reject) => this.waiting.push({ resolve, reject }));
    }
    // A caller looping on IDs that are ready at once never gives the event loop a turn, so
    // the refills it started would neither be sent nor answered until the buffer runs dry.
    // Yield now and then while refills are in flight.
    if (this.refilling > 0 && ++this.sinceYield >= 256) {
      this.sinceYield = 0;
      await new Promise((resolve) => setImmediate(resolve));
    }
    return id;
  }

  /** Pops one ID, dropping the front batches past their age or used up. */
  private take(now: number): bigint | undefined {
    while (this.batches.length > 0) {
      const front = this.batches[0]!;
      const left = front.ids.length - front.next;
      if (left > 0 && now - front.arrived <= this.maxAgeMs) {
        this.buffered--;
        return front.ids[front.next++];
      }
      this.batches.shift();
      this.buffered -= left;
    }
    return undefined;
  }

  private startRefills(): void {
    while (this.refilling < this.maxRefills && this.buffered + this.refilling * this.batch <= this.lowWater) {
      this.refilling++;
      this.pool.fetch(this.batch).then(
        (ids) => this.arrived(ids),
        (error) => this.failed(error),
      );
    }
  }

  /** A refill arrived: serve the waiting callers first, then buffer the rest. */
  private arrived(ids: bigint[]): void {
    this.refilling--;
    const batch: Batch = { ids, next: 0, arrived: performance.now() };
    while (batch.next < ids.length && this.waiting.length > 0) {
      this.waiting.shift()!.resolve(ids[batch.next++]!);
    }
    if (batch.next < ids.length) {
      this.batches.push(batch);
      this.buffered += ids.length - batch.next;
    }
    this.startRefills();
  }

  private failed(error: unknown): void {
    this.refilling--;
    if (this.refilling === 0) {
      // No other refill may serve them: they get this one's error.
      for (const caller of this.waiting.splice(0)) {
        caller.reject(error);
      }
    }
  }
}

/**
 * A client of one or several snowmint servers. IDs are `bigint`s, never `number`s.
 *
 * - A refusal (`UNAVAILABLE`: a server that cannot promise unique IDs refuses) or a transport
 *   failure moves the call to the next endpoint, which later calls keep using; other errors
 *   reject as they are ({@link RejectedError}). When every attempt fails, the call rejects with
 *   the retriable {@link UnavailableError}.
 * - Without a buffer, concurrent `nextId()` calls are coalesced: the callers waiting while a
 *   call is in flight are all served by the next one, a single `BatchIds`.
 * - With a buffer, `nextId()` takes IDs prefetched in the background.
 */
export class SnowmintClient {
  private readonly pool: EndpointPool;
  private readonly source: { nextId(): Promise<bigint> };

  /**
   * @param endpoints URLs such as `http://127.0.0.1:50051` (`https://` for TLS), tried in
   *   order. Connections open lazily; with a buffer, the first refills start at once.
   * @throws TypeError for no endpoints or one that is not an `http(s)://host:port` URL
   */
  constructor(endpoints: string | readonly string[], options: ClientOptions = {}) {
    const urls = typeof endpoints === 'string' ? [endpoints] : endpoints;
    if (urls.length === 0) {
      throw new TypeError('no endpoints given');
    }
    const { deadlineMs = 1000, attempts = Math.max(2, 2 * urls.length), buffer } = options;
    positive('deadlineMs', deadlineMs);
    positive('attempts', attempts);
    this.pool = new EndpointPool(urls, deadlineMs, attempts);
    if (buffer) {
      const { batch = 4096, lowWater = 8192, maxRefills = 3, maxAgeMs = 1000 } = buffer === true ? {} : buffer;
      positive('buffer.batch', batch);
      positive('buffer.maxRefills', maxRefills);
      positive('buffer.maxAgeMs', maxAgeMs);
      if (!Number.isInteger(lowWater) || lowWater < 0) {
        throw new RangeError(`buffer.lowWater must be a whole number, at least 0, got ${lowWater}`);
      }
      this.source = new PrefetchBuffer(this.pool, batch, lowWater, maxRefills, maxAgeMs);
    } else {
      this.source = new Coalescer(this.pool);
    }
  }

  /**
   * One ID: from the buffer if there is one, otherwise coalesced with every other `nextId()`
   * waiting at the same moment.
   * @throws UnavailableError every endpoint refused or failed: retry later
   * @throws RejectedError the server rejected the request
   * @throws ClientClosedError after {@link close}
   */
  nextId(): Promise<bigint> {
    if (this.pool.closed) {
      return Promise.reject(new ClientClosedError());
    }
    return this.source.nextId();
  }

  /**
   * `count` IDs, strictly increasing, straight from one server (never from the buffer). A
   * count the server does not accept (0, or above its maximum, 65,536 by default) rejects
   * with {@link RejectedError} (`INVALID_ARGUMENT`), as the server answered.
   * @throws RangeError for a count that is not a whole number from 0 to 2^32 - 1
   */
  async batch(count: number): Promise<bigint[]> {
    if (!Number.isInteger(count) || count < 0 || count > 0xffff_ffff) {
      throw new RangeError(`count must be a whole number from 0 to 2^32 - 1, got ${count}`);
    }
    return this.pool.fetch(count);
  }

  /** Closes the connections. Later calls reject with {@link ClientClosedError}; buffered IDs are dropped. */
  close(): void {
    this.pool.close();
  }
}

function positive(name: string, value: number): void {
  if (!Number.isInteger(value) || value < 1) {
    throw new RangeError(`${name} must be a whole number, at least 1, got ${value}`);
  }
}
