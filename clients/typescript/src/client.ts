import { Client, Metadata, credentials, status as Status, type ServiceError } from '@grpc/grpc-js';
import { setTimeout as sleep } from 'node:timers/promises';

import { ClientClosedError, RejectedError, UnavailableError } from './errors.js';
import { idService, toBigInt } from './proto.js';

/** The local buffer's settings; each defaults to the Rust client's. */
export interface BufferOptions {
  /** IDs asked for per refill (one `BatchIds` call). Default 4096. */
  batch?: number;
  /** A refill starts when the IDs buffered plus those on their way are at or below this. Default 8192. */
  lowWater?: number;
  /** Refills in flight at once, to keep up with heavy use. Default 3. */
  maxRefills?: number;
  /**
   * A buffered batch older than this (ms, counted from when its refill was sent) is dropped
   * unused, so the IDs a process hands out stay roughly time-sorted. Dropped IDs are gaps,
   * never duplicates. Default 1000.
   */
  maxAgeMs?: number;
}

export interface ClientOptions {
  /**
   * The timeout of each attempt on a server, in ms (default 1000). A server that cannot mint
   * in time refuses before it passes, so the call can move on to the next endpoint.
   */
  timeoutMs?: number;
  /**
   * How many attempts one call may make across endpoints before it fails (default: twice the
   * number of endpoints, at least 2), so every endpoint gets a second chance after a pause.
   */
  attempts?: number;
  /** Prefetch IDs into a local buffer (`true` for the defaults), so most `nextId()` calls need no round trip. */
  buffer?: BufferOptions | boolean;
}

/** Bounds on one call, all of its attempts included. */
export interface CallOptions {
  /**
   * The most this call may take, in ms; past it, it rejects with {@link UnavailableError}
   * (code `DEADLINE_EXCEEDED`). Each attempt gets the smaller of this and the client's timeout.
   */
  timeoutMs?: number;
  /** Aborting ends the call at once; it rejects with the signal's reason. */
  signal?: AbortSignal;
}

/** A call's bounds: its deadline on the monotonic clock (`performance.now()`), its signal. */
interface Bound {
  deadline?: number;
  signal?: AbortSignal;
}

const FIRST_BACKOFF_MS = 10;
const MAX_BACKOFF_MS = 320;
/** After a refill failed on every endpoint, no refill starts for this long (ms). */
const REFILL_PAUSE_MS = 100;
/** The most IDs one coalesced call asks for: the server's default `--max-batch`. */
const MAX_PER_CALL = 65_536;

interface Endpoint {
  address: string;
  client: Client;
}

/** `host:port` or `http://host:port` (plain text), or `https://host:port` (TLS). */
function connect(address: string): Endpoint {
  const secure = address.startsWith('https://');
  const hostPort = address.replace(/^https?:\/\//, '');
  const match = /^(\[[^\]]+\]|[^:/[\]]+):(\d{1,5})$/.exec(hostPort);
  if (!match || Number(match[2]) > 65535) {
    throw new TypeError(`invalid endpoint ${JSON.stringify(address)}: expected host:port, http://host:port or https://host:port`);
  }
  return { address, client: new Client(hostPort, secure ? credentials.createSsl() : credentials.createInsecure()) };
}

/** The caller's own deadline passed: the call ends, retriable later. */
function deadlinePassed(attempts: number, last?: string): UnavailableError {
  const tried = attempts === 0 ? '' : ` (${attempts} attempts; last, ${last})`;
  return new UnavailableError(`no IDs within the call's timeout${tried}`, Status.DEADLINE_EXCEEDED, 'the call\'s timeout passed');
}

/**
 * The connections, and which one to use next. An attempt that is refused (`UNAVAILABLE`),
 * fails in transport (also `UNAVAILABLE`) or gets no answer within its deadline moves the call
 * to the next endpoint, which later calls keep using; every other error returns as it is.
 */
class EndpointPool {
  private readonly endpoints: Endpoint[];
  /** Index of the endpoint to try first. */
  private current = 0;
  closed = false;

  constructor(
    addresses: readonly string[],
    private readonly timeoutMs: number,
    private readonly attempts: number,
  ) {
    const endpoints: Endpoint[] = [];
    try {
      for (const address of addresses) {
        endpoints.push(connect(address));
      }
    } catch (error) {
      endpoints.forEach((e) => e.client.close());
      throw error;
    }
    this.endpoints = endpoints;
  }

  /** The longest a call without a deadline of its own may take: every attempt's timeout. */
  get longestCallMs(): number {
    return this.timeoutMs * this.attempts;
  }

  /** `count` IDs from one server (`NextId` for one, `BatchIds` for more), failing over. */
  async fetch(count: number, bound: Bound = {}): Promise<bigint[]> {
    const { deadline, signal } = bound;
    const n = this.endpoints.length;
    let last: { failure: string; error: ServiceError } | undefined;
    for (let attempt = 0; attempt < this.attempts; attempt++) {
      if (this.closed) {
        throw new ClientClosedError();
      }
      signal?.throwIfAborted();
      let attemptMs = this.timeoutMs;
      if (deadline !== undefined) {
        const left = deadline - performance.now();
        if (left <= 0) {
          throw deadlinePassed(attempt, last?.failure);
        }
        attemptMs = Math.min(attemptMs, left);
      }
      const index = this.current;
      const endpoint = this.endpoints[index]!;
      try {
        return await this.call(endpoint, count, attemptMs, signal);
      } catch (e) {
        signal?.throwIfAborted();
        if (this.closed) {
          throw new ClientClosedError(); // closing cut the call: no answer of the server's
        }
        const error = e as ServiceError;
        const failure = `${endpoint.address}: ${describe(error)}`;
        if (error.code !== Status.UNAVAILABLE && error.code !== Status.DEADLINE_EXCEEDED) {
          throw new RejectedError(`the server at ${endpoint.address} rejected the request: ${describe(error)}`, error.code, error.details);
        }
        if (this.current === index) {
          this.current = (index + 1) % n; // unless another call already moved on
        }
        last = { failure, error };
        const next = attempt + 1;
        if (next < this.attempts && next >= n) {
          // Every endpoint tried: wait before each further attempt, 10 ms doubling to 320 ms.
          let backoff = Math.min(FIRST_BACKOFF_MS * 2 ** (next - n), MAX_BACKOFF_MS);
          if (deadline !== undefined) {
            backoff = Math.max(0, Math.min(backoff, deadline - performance.now()));
          }
          await sleep(backoff, undefined, signal ? { signal } : {}).catch(() => signal?.throwIfAborted());
        }
      }
    }
    const { failure, error } = last!;
    throw new UnavailableError(
      `every endpoint refused or failed (${this.attempts} attempts over ${n} endpoints); last, ${failure}`,
      error.code,
      error.details,
    );
  }

  private call(endpoint: Endpoint, count: number, timeoutMs: number, signal?: AbortSignal): Promise<bigint[]> {
    const options = { deadline: Date.now() + timeoutMs };
    return new Promise((resolve, reject) => {
      let cancel: (() => void) | undefined;
      const done = (error: unknown, ids?: bigint[]) => {
        if (cancel) {
          signal?.removeEventListener('abort', cancel);
        }
        if (ids) {
          resolve(ids);
        } else {
          reject(error);
        }
      };
      const call =
        count === 1
          ? endpoint.client.makeUnaryRequest(idService.NextId.path, idService.NextId.requestSerialize,
              idService.NextId.responseDeserialize, {}, new Metadata(), options,
              (error, response) => done(error, error || !response ? undefined : [toBigInt(response.id)]))
          : endpoint.client.makeUnaryRequest(idService.BatchIds.path, idService.BatchIds.requestSerialize,
              idService.BatchIds.responseDeserialize, { count }, new Metadata(), options,
              (error, response) => {
                if (error || !response) {
                  done(error);
                } else if (response.ids.length !== count) {
                  // Callers are promised one ID each: a short reply must fail them, not strand them.
                  const details = `asked for ${count} IDs, got ${response.ids.length}`;
                  done(Object.assign(new Error(details), { code: Status.INTERNAL, details }));
                } else {
                  done(null, response.ids.map(toBigInt));
                }
              });
      if (signal) {
        cancel = () => call.cancel();
        signal.addEventListener('abort', cancel, { once: true });
      }
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

/**
 * A caller waiting for one ID that another call is fetching. Settles once: served, failed,
 * timed out or aborted; whoever serves waiters skips a settled one.
 */
class Waiter {
  settled = false;
  readonly promise: Promise<bigint>;
  private resolveFn!: (id: bigint) => void;
  private rejectFn!: (error: unknown) => void;
  private timer: NodeJS.Timeout | undefined;
  private onAbort: (() => void) | undefined;

  /**
   * @param limitMs how long to wait at most, if at all
   * @param timedOut the error for a wait past `limitMs`
   */
  constructor(limitMs: number | undefined, timedOut: () => Error, private readonly signal?: AbortSignal) {
    this.promise = new Promise((resolve, reject) => {
      this.resolveFn = resolve;
      this.rejectFn = reject;
    });
    if (signal?.aborted) {
      this.reject(signal.reason);
      return;
    }
    if (limitMs !== undefined) {
      this.timer = setTimeout(() => this.reject(timedOut()), Math.max(0, limitMs));
    }
    if (signal) {
      this.onAbort = () => this.reject(signal.reason);
      signal.addEventListener('abort', this.onAbort, { once: true });
    }
  }

  resolve(id: bigint): void {
    if (this.settle()) {
      this.resolveFn(id);
    }
  }

  reject(error: unknown): void {
    if (this.settle()) {
      this.rejectFn(error);
    }
  }

  private settle(): boolean {
    if (this.settled) {
      return false;
    }
    this.settled = true;
    clearTimeout(this.timer);
    if (this.onAbort) {
      this.signal?.removeEventListener('abort', this.onAbort);
    }
    return true;
  }
}

/** The wait of a caller with `bound`, or `defaultMs` without a deadline of its own. */
function waiter(bound: Bound, defaultMs?: number): Waiter {
  if (bound.deadline !== undefined) {
    return new Waiter(bound.deadline - performance.now(), () => deadlinePassed(0), bound.signal);
  }
  return new Waiter(
    defaultMs,
    () => new UnavailableError(`no IDs arrived within ${defaultMs} ms`, Status.UNAVAILABLE, 'no IDs arrived in time'),
    bound.signal,
  );
}

/**
 * Serves unbuffered `nextId()` calls: every caller waiting while a call is in flight is served
 * by the next call, one `BatchIds` for all of them (`NextId` for one). As the Rust client does;
 * an optimization beyond the client contract.
 */
class Coalescer {
  private waiting: Waiter[] = [];
  private fetching = false;

  constructor(private readonly pool: EndpointPool) {}

  nextId(bound: Bound): Promise<bigint> {
    const caller = waiter(bound);
    this.waiting.push(caller);
    if (!this.fetching) {
      this.fetching = true;
      // After the current task: callers asking in the same burst share the first call too.
      queueMicrotask(() => void this.fetchForWaiting());
    }
    return caller.promise;
  }

  private async fetchForWaiting(): Promise<void> {
    for (;;) {
      const callers = this.waiting.filter((w) => !w.settled).slice(0, MAX_PER_CALL);
      this.waiting = this.waiting.filter((w) => !w.settled).slice(callers.length);
      if (callers.length === 0) {
        break;
      }
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
  /** When its refill was sent, on the monotonic clock (ms): every ID in it was minted after. */
  sent: number;
}

/**
 * The local buffer of prefetched IDs. Every ID leaves it once (the event loop has one thread):
 * handed to one caller, or dropped with its batch. A refill that fails on every endpoint fails
 * the callers waiting, and no refill starts for 100 ms after it, so callers looping on a down
 * fleet do not hammer it.
 */
class PrefetchBuffer {
  /** Oldest arrival first. */
  private readonly batches: Batch[] = [];
  private waiting: Waiter[] = [];
  private buffered = 0;
  private refilling = 0;
  /** No refill starts before this (`performance.now()`), after a failed one. */
  private pausedUntil = 0;
  private wake: NodeJS.Timeout | undefined;
  /** Calls served from the buffer since the last yield to the event loop. */
  private sinceYield = 0;

  constructor(
    private readonly pool: EndpointPool,
    private readonly batch: number,
    private readonly lowWater: number,
    private readonly maxRefills: number,
    private readonly maxAgeMs: number,
  ) {
    this.startRefills(performance.now());
  }

  nextId(bound: Bound): Promise<bigint> {
    const now = performance.now();
    const id = this.take(now);
    if (id === undefined) {
      const caller = waiter(bound, this.pool.longestCallMs);
      this.waiting.push(caller);
      this.startRefills(now);
      return caller.promise;
    }
    this.startRefills(now);
    // A caller looping on IDs that are ready at once never gives the event loop a turn, so
    // the refills it started would neither be sent nor answered until the buffer runs dry.
    // Yield now and then while refills are in flight.
    if (this.refilling > 0 && ++this.sinceYield >= 256) {
      this.sinceYield = 0;
      return new Promise((resolve) => setImmediate(resolve, id));
    }
    return Promise.resolve(id);
  }

  /** Pops one ID, dropping the front batches past their age or used up. */
  private take(now: number): bigint | undefined {
    while (this.batches.length > 0) {
      const front = this.batches[0]!;
      const left = front.ids.length - front.next;
      if (left > 0 && now - front.sent <= this.maxAgeMs) {
        this.buffered--;
        return front.ids[front.next++];
      }
      this.batches.shift();
      this.buffered -= left;
    }
    return undefined;
  }

  private startRefills(now: number): void {
    if (this.pool.closed) {
      return;
    }
    if (now < this.pausedUntil) {
      if (this.wake === undefined && this.waiting.some((w) => !w.settled)) {
        // Someone is waiting: start their refill once the pause is over.
        this.wake = setTimeout(() => {
          this.wake = undefined;
          this.startRefills(performance.now());
        }, this.pausedUntil - now);
      }
      return;
    }
    while (this.refilling < this.maxRefills && this.buffered + this.refilling * this.batch <= this.lowWater) {
      this.refilling++;
      const sent = performance.now();
      this.pool.fetch(this.batch).then(
        (ids) => this.arrived(sent, ids),
        (error) => this.failed(error),
      );
    }
  }

  /** A refill arrived: serve the waiting callers first, then buffer the rest. */
  private arrived(sent: number, ids: bigint[]): void {
    this.refilling--;
    const batch: Batch = { ids, next: 0, sent };
    const waiting = this.waiting.filter((w) => !w.settled);
    const served = Math.min(waiting.length, ids.length);
    this.waiting = waiting.slice(served);
    for (let i = 0; i < served; i++) {
      waiting[i]!.resolve(ids[batch.next++]!);
    }
    if (batch.next < ids.length) {
      this.batches.push(batch);
      this.buffered += ids.length - batch.next;
    }
    this.startRefills(performance.now());
  }

  private failed(error: unknown): void {
    this.refilling--;
    this.pausedUntil = performance.now() + REFILL_PAUSE_MS;
    for (const caller of this.waiting.splice(0)) {
      caller.reject(error);
    }
  }

  close(): void {
    clearTimeout(this.wake);
    for (const caller of this.waiting.splice(0)) {
      caller.reject(new ClientClosedError());
    }
  }
}

/**
 * A client of one or several snowmint servers. IDs are `bigint`s, never `number`s.
 *
 * - A refusal (`UNAVAILABLE`: a server that cannot promise unique IDs refuses), a transport
 *   failure, or no answer within the attempt's timeout moves the call to the next endpoint,
 *   which later calls keep using; other errors reject as they are ({@link RejectedError}).
 *   When every attempt fails, the call rejects with the retriable {@link UnavailableError}.
 * - Every attempt has the client's `timeoutMs`; a caller may bound a whole call, all attempts
 *   included, with {@link CallOptions}.
 * - With a buffer, `nextId()` takes IDs prefetched in the background. Without one, concurrent
 *   `nextId()` calls are coalesced: the callers waiting while a call is in flight are all
 *   served by the next one, a single `BatchIds`.
 */
export class SnowmintClient {
  private readonly pool: EndpointPool;
  private readonly buffer: PrefetchBuffer | undefined;
  private readonly coalescer: Coalescer | undefined;

  /**
   * @param endpoints `host:port` or `http://host:port` for plain text, `https://host:port` for
   *   TLS; tried in order. Connections open lazily; with a buffer, the first refills start at once.
   * @throws TypeError for no endpoints or a malformed one
   */
  constructor(endpoints: string | readonly string[], options: ClientOptions = {}) {
    const addresses = typeof endpoints === 'string' ? [endpoints] : endpoints;
    if (addresses.length === 0) {
      throw new TypeError('no endpoints given');
    }
    const { timeoutMs = 1000, attempts = Math.max(2, 2 * addresses.length), buffer } = options;
    positive('timeoutMs', timeoutMs);
    positive('attempts', attempts);
    let settings: Required<BufferOptions> | undefined;
    if (buffer) {
      const { batch = 4096, lowWater = 8192, maxRefills = 3, maxAgeMs = 1000 } = buffer === true ? {} : buffer;
      positive('buffer.batch', batch);
      positive('buffer.maxRefills', maxRefills);
      positive('buffer.maxAgeMs', maxAgeMs);
      if (!Number.isInteger(lowWater) || lowWater < 0) {
        throw new RangeError(`buffer.lowWater must be a whole number, at least 0, got ${lowWater}`);
      }
      settings = { batch, lowWater, maxRefills, maxAgeMs };
    }
    this.pool = new EndpointPool(addresses, timeoutMs, attempts);
    if (settings) {
      const { batch, lowWater, maxRefills, maxAgeMs } = settings;
      this.buffer = new PrefetchBuffer(this.pool, batch, lowWater, maxRefills, maxAgeMs);
    } else {
      this.coalescer = new Coalescer(this.pool);
    }
  }

  /**
   * One ID: from the buffer if there is one, otherwise coalesced with every other `nextId()`
   * waiting at the same moment.
   * @throws UnavailableError every endpoint refused or failed, or the call's timeout passed: retry later
   * @throws RejectedError the server rejected the request
   * @throws ClientClosedError after {@link close}
   * @throws RangeError for a `timeoutMs` that is not positive
   */
  nextId(options?: CallOptions): Promise<bigint> {
    if (this.pool.closed) {
      return Promise.reject(new ClientClosedError());
    }
    let bound: Bound;
    try {
      bound = boundOf(options);
    } catch (error) {
      return Promise.reject(error);
    }
    return this.buffer ? this.buffer.nextId(bound) : this.coalescer!.nextId(bound);
  }

  /**
   * `count` IDs, strictly increasing, straight from one server (never from the buffer). A
   * count the server does not accept (0, or above its maximum, 65,536 by default) rejects
   * with {@link RejectedError} (`INVALID_ARGUMENT`), as the server answered.
   * @throws RangeError for a count that is not a whole number from 0 to 2^32 - 1
   */
  async batch(count: number, options?: CallOptions): Promise<bigint[]> {
    if (!Number.isInteger(count) || count < 0 || count > 0xffff_ffff) {
      throw new RangeError(`count must be a whole number from 0 to 2^32 - 1, got ${count}`);
    }
    return this.pool.fetch(count, boundOf(options));
  }

  /**
   * Stops the buffer's refills and closes the connections. Later calls reject with
   * {@link ClientClosedError}, as do callers waiting on an empty buffer; buffered IDs are dropped.
   */
  close(): void {
    this.pool.close();
    this.buffer?.close();
  }
}

/** The bounds of a call with no options of its own: shared, as most calls have none. */
const UNBOUNDED: Bound = Object.freeze({});

function boundOf(options: CallOptions | undefined): Bound {
  if (options === undefined || (options.timeoutMs === undefined && options.signal === undefined)) {
    return UNBOUNDED;
  }
  const { timeoutMs, signal } = options;
  if (timeoutMs !== undefined && !(timeoutMs > 0)) {
    throw new RangeError(`timeoutMs must be positive, got ${timeoutMs}`);
  }
  return {
    ...(timeoutMs === undefined ? {} : { deadline: performance.now() + timeoutMs }),
    ...(signal === undefined ? {} : { signal }),
  };
}

function positive(name: string, value: number): void {
  if (!Number.isInteger(value) || value < 1) {
    throw new RangeError(`${name} must be a whole number, at least 1, got ${value}`);
  }
}
