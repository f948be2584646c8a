/**
 * The connections, and the contract's rule for moving between them (clients/README.md). All
 * calls go to one current endpoint. An attempt that is refused (`UNAVAILABLE`), fails in
 * transport (also `UNAVAILABLE` in grpc-js) or gets no answer within its own deadline moves the
 * current endpoint to the next; every other error returns as it is, and an attempt cut short by
 * the caller's own deadline ends the call and moves nothing. Once every endpoint was tried in a
 * call, each further attempt waits first: 10 ms, doubling, at most 320 ms. A refusal over the
 * tenant's quota (`RESOURCE_EXHAUSTED` with a `RetryInfo`) is waited out in place of that pause,
 * and the next attempt goes to the same endpoint, when the call has an attempt and the time
 * left; otherwise it ends the call as it is. With a token, every attempt carries it.
 */
import { Client, Metadata, credentials, status as Status, type ChannelOptions, type ServiceError } from '@grpc/grpc-js';

import { ClientClosedError, DeadlineExceededError, RejectedError, UnavailableError } from './errors.js';
import type { Bound, TlsOptions } from './options.js';
import { Uuid } from './uuid.js';
import {
  BATCH_IDS,
  BATCH_UUIDS,
  BATCH_VALUES,
  NEXT_ID,
  NEXT_UUID,
  NEXT_VALUE,
  batchIdsRequest,
  batchIdsResponse,
  batchUuidsRequest,
  batchUuidsResponse,
  batchValuesRequest,
  batchValuesResponse,
  identity,
  nextIdRequest,
  nextIdResponse,
  nextUuidRequest,
  nextUuidResponse,
  nextValueRequest,
  nextValueResponse,
  orderedOf,
  retryDelayMs,
} from './wire.js';
import type { SequenceAnswer } from './wire.js';

/**
 * grpc-js holds a connection that failed in a reconnect backoff (up to 120 s by default,
 * failing every call to it meanwhile); kept under half a second (plus a fifth of jitter), a
 * server that comes back is used again within a second.
 */
const CHANNEL_OPTIONS: ChannelOptions = {
  'grpc.initial_reconnect_backoff_ms': 100,
  'grpc.max_reconnect_backoff_ms': 500,
};

/** The longest wait `setTimeout` can make, in ms: a quota refusal asking for more ends the call, as one past its deadline does. */
const LONGEST_WAIT_MS = 2 ** 31 - 1;

/** The pause before attempt `k` (from 0) of a call over `n` endpoints, in ms. */
export function pauseBefore(k: number, n: number): number {
  return k < n || k === 0 ? 0 : 10 * 2 ** Math.min(k - n, 5);
}

interface Endpoint {
  address: string;
  client: Client;
}

function pem(value: string | Buffer | undefined): Buffer | null {
  return value === undefined ? null : Buffer.from(value);
}

/** `host:port` or `http://host:port` (plain text), or `https://host:port` (TLS). */
function connect(address: string, tls: TlsOptions | undefined): Endpoint {
  const secure = address.startsWith('https://');
  const hostPort = address.replace(/^https?:\/\//, '');
  const match = /^(\[[^\]]+\]|[^:/[\]]+):(\d{1,5})$/.exec(hostPort);
  if (!match || Number(match[2]) > 65535) {
    throw new TypeError(`invalid endpoint ${JSON.stringify(address)}: expected host:port, http://host:port or https://host:port`);
  }
  const creds = secure ? credentials.createSsl(pem(tls?.ca), pem(tls?.key), pem(tls?.cert)) : credentials.createInsecure();
  return { address, client: new Client(hostPort, creds, CHANNEL_OPTIONS) };
}

function describe(error: ServiceError): string {
  return `${Status[error.code] ?? error.code}: ${error.details || error.message}`;
}

/**
 * The retry delay (ms) of a quota refusal: the `google.rpc.RetryInfo` in its status details
 * (the `grpc-status-details-bin` trailer), if it has one that reads.
 */
export function quotaDelayMs(error: ServiceError): number | undefined {
  if (error.code !== Status.RESOURCE_EXHAUSTED) {
    return undefined;
  }
  const details = error.metadata?.get('grpc-status-details-bin').find((value) => Buffer.isBuffer(value));
  return details === undefined ? undefined : retryDelayMs(details as Buffer);
}

/** One attempt's bounds: its own timeout, and the caller's signal. */
interface AttemptOptions {
  timeoutMs: number;
  signal: AbortSignal | undefined;
}

/** A malformed answer: the client's error (`INTERNAL`), returned as a server's other errors are. */
function malformed(details: string): ServiceError {
  return Object.assign(new Error(details), { code: Status.INTERNAL, details, metadata: new Metadata() });
}

/** A batch's answer, checked to hold `count` values: callers are promised one each, and a short reply must fail them, not strand them. */
function counted<T>(what: string, count: number, values: T[]): T[] {
  if (values.length !== count) {
    throw malformed(`asked for ${count} ${what}, got ${values.length}`);
  }
  return values;
}

/** A sequence's values as answered: positive and increasing, or a malformed answer. */
function positiveIncreasing(values: bigint[]): bigint[] {
  values.forEach((value, i) => {
    if (value < 1n || (i > 0 && value <= values[i - 1]!)) {
      throw malformed('sequence values that are not positive and increasing');
    }
  });
  return values;
}

/** The UUID of an answer's bytes, which must be 16. */
function uuidOf(bytes: Uint8Array): Uuid {
  if (bytes.length !== 16) {
    throw malformed(`a UUID of ${bytes.length} bytes, not 16`);
  }
  return new Uuid(bytes);
}

export class EndpointPool {
  private readonly endpoints: Endpoint[];
  /** Index of the endpoint to try first. */
  private current = 0;
  /**
   * The calls in flight, cancelled by `close()`. A private field, as the token's is: a call
   * holds its metadata, which the client's printed form must not reach.
   */
  readonly #inFlight = new Set<{ cancel(): void }>();
  /** The pauses and quota waits under way, ended by `close()`. */
  private readonly waits = new Set<() => void>();
  /** `Bearer <token>`, or none: a private field, so the client's printed form never shows it. */
  readonly #authorization: string | undefined;
  closed = false;

  constructor(
    addresses: readonly string[],
    private readonly timeoutMs: number,
    private readonly attempts: number,
    tls: TlsOptions | undefined,
    token: string | undefined,
  ) {
    this.#authorization = token === undefined ? undefined : `Bearer ${token}`;
    const endpoints: Endpoint[] = [];
    try {
      for (const address of addresses) {
        endpoints.push(connect(address, tls));
      }
    } catch (error) {
      endpoints.forEach((e) => e.client.close());
      throw error;
    }
    this.endpoints = endpoints;
  }

  /** The longest a call without a deadline of its own may take: every attempt's timeout, and the pauses between them. */
  get longestCallMs(): number {
    let pauses = 0;
    for (let k = 0; k < this.attempts; k++) {
      pauses += pauseBefore(k, this.endpoints.length);
    }
    return this.timeoutMs * this.attempts + pauses;
  }

  /** One `NextId` call, failing over. */
  nextId(bound: Bound): Promise<bigint[]> {
    return this.fetch(bound, async (endpoint, attempt) => [
      await this.unary(endpoint, NEXT_ID, nextIdRequest(), nextIdResponse, attempt),
    ]);
  }

  /** One `BatchIds` call of `count`, failing over. */
  batch(count: number, bound: Bound): Promise<bigint[]> {
    return this.fetch(bound, async (endpoint, attempt) =>
      counted('IDs', count, await this.unary(endpoint, BATCH_IDS, batchIdsRequest(count), batchIdsResponse, attempt)),
    );
  }

  /** One `NextUuid` call, failing over. */
  nextUuid(bound: Bound): Promise<Uuid> {
    return this.fetch(bound, async (endpoint, attempt) =>
      uuidOf(await this.unary(endpoint, NEXT_UUID, nextUuidRequest(), nextUuidResponse, attempt)),
    );
  }

  /** One `BatchUuids` call of `count`, failing over. */
  batchUuids(count: number, bound: Bound): Promise<Uuid[]> {
    return this.fetch(bound, async (endpoint, attempt) =>
      counted('UUIDs', count, await this.unary(endpoint, BATCH_UUIDS, batchUuidsRequest(count), batchUuidsResponse, attempt)).map(uuidOf),
    );
  }

  /** One `NextValue` call of sequence `name`, failing over. */
  nextValue(name: string, bound: Bound): Promise<SequenceAnswer> {
    const request = nextValueRequest(name);
    const read = (data: Buffer): SequenceAnswer => ({ values: [nextValueResponse(data)], ordered: orderedOf(data) });
    return this.fetch(bound, async (endpoint, attempt) => {
      const answer = await this.unary(endpoint, NEXT_VALUE, request, read, attempt);
      return { values: positiveIncreasing(answer.values), ordered: answer.ordered };
    });
  }

  /** One `BatchValues` call of `count` of sequence `name`, failing over. */
  batchValues(name: string, count: number, bound: Bound): Promise<SequenceAnswer> {
    const request = batchValuesRequest(name, count);
    const read = (data: Buffer): SequenceAnswer => ({ values: batchValuesResponse(data), ordered: orderedOf(data) });
    return this.fetch(bound, async (endpoint, attempt) => {
      const answer = await this.unary(endpoint, BATCH_VALUES, request, read, attempt);
      return { values: positiveIncreasing(counted('values', count, answer.values)), ordered: answer.ordered };
    });
  }

  /**
   * One call: `attempt` made on the current endpoint, failing over as the contract says. An
   * error it throws with a gRPC `code` counts as that endpoint's answer. A quota refusal's
   * delay, when the call can use it, is the pause before the next attempt, on the same endpoint.
   */
  private async fetch<T>(bound: Bound, attempt: (endpoint: Endpoint, options: AttemptOptions) => Promise<T>): Promise<T> {
    const { deadline, signal } = bound;
    const n = this.endpoints.length;
    let last: ServiceError | undefined;
    let lastAddress = '';
    // After a quota refusal: its delay, and the endpoint that asked for it, to try again.
    let quota: { delay: number; index: number } | undefined;
    for (let k = 0; k < this.attempts; k++) {
      const pause = quota ? quota.delay : pauseBefore(k, n);
      if (pause > 0) {
        if (deadline !== undefined && performance.now() + pause >= deadline) {
          await this.wait(Math.max(0, deadline - performance.now()), signal);
          throw new DeadlineExceededError();
        }
        await this.wait(pause, signal);
      }
      if (this.closed) {
        throw new ClientClosedError();
      }
      signal?.throwIfAborted();
      let attemptMs = this.timeoutMs;
      if (deadline !== undefined) {
        const left = deadline - performance.now();
        if (left <= 0) {
          throw new DeadlineExceededError();
        }
        attemptMs = Math.min(attemptMs, left);
      }
      const index = quota ? quota.index : this.current;
      quota = undefined;
      const endpoint = this.endpoints[index]!;
      try {
        return await attempt(endpoint, { timeoutMs: attemptMs, signal });
      } catch (e) {
        signal?.throwIfAborted();
        if (this.closed) {
          throw new ClientClosedError(); // closing cut the call: no answer of a server's
        }
        const error = e as ServiceError;
        const callerPassed = deadline !== undefined && performance.now() >= deadline;
        if ((callerPassed || attemptMs < this.timeoutMs) && error.code === Status.DEADLINE_EXCEEDED) {
          // The caller's deadline, which cut the attempt short, not the server: nothing moves.
          throw new DeadlineExceededError();
        }
        const delay = quotaDelayMs(error);
        if (
          delay !== undefined &&
          delay <= LONGEST_WAIT_MS &&
          k + 1 < this.attempts &&
          (deadline === undefined || deadline - performance.now() > delay)
        ) {
          // Over the tenant's quota here: wait as asked, then try here again (nothing moves).
          quota = { delay, index };
          continue;
        }
        if (error.code !== Status.UNAVAILABLE && error.code !== Status.DEADLINE_EXCEEDED) {
          throw new RejectedError(
            `the server at ${endpoint.address} rejected the request: ${describe(error)}`,
            error.code,
            error.details,
            delay,
          );
        }
        if (this.current === index) {
          this.current = (index + 1) % n; // unless another call already moved on
        }
        if (callerPassed) {
          throw new DeadlineExceededError();
        }
        last = error;
        lastAddress = endpoint.address;
      }
    }
    throw new UnavailableError(
      `every endpoint refused or failed (${this.attempts} attempts over ${n} endpoints); the last, ${lastAddress}: ${describe(last!)}`,
      { code: last!.code, details: last!.details },
    );
  }

  /** One unary call of `path` on `endpoint`, its answer read with `read`; cancelled by `close()` and by the signal. */
  private unary<R>(endpoint: Endpoint, path: string, request: Buffer, read: (data: Buffer) => R, attempt: AttemptOptions): Promise<R> {
    const { timeoutMs, signal } = attempt;
    const options = { deadline: Date.now() + timeoutMs };
    return new Promise((resolve, reject) => {
      let cancel: (() => void) | undefined;
      const call = endpoint.client.makeUnaryRequest(path, identity, read, request, this.metadata(), options, (error, answer) => {
        this.#inFlight.delete(call);
        if (cancel) {
          signal?.removeEventListener('abort', cancel);
        }
        if (error || answer === undefined) {
          reject(error);
        } else {
          resolve(answer);
        }
      });
      this.#inFlight.add(call);
      if (signal) {
        cancel = () => call.cancel();
        signal.addEventListener('abort', cancel, { once: true });
      }
    });
  }

  /** An attempt's metadata: the token's `authorization`, if any. */
  private metadata(): Metadata {
    const metadata = new Metadata();
    if (this.#authorization !== undefined) {
      metadata.set('authorization', this.#authorization);
    }
    return metadata;
  }

  /**
   * Waits `ms` (a pause, or a quota refusal's delay): ended at once by the caller's signal
   * (rejecting with its reason) and by `close()` (with `ClientClosedError`).
   */
  private wait(ms: number, signal: AbortSignal | undefined): Promise<void> {
    return new Promise((resolve, reject) => {
      if (this.closed) {
        reject(new ClientClosedError());
        return;
      }
      if (signal?.aborted) {
        reject(signal.reason);
        return;
      }
      const end = (settle: () => void) => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', aborted);
        this.waits.delete(closed);
        settle();
      };
      const aborted = () => end(() => reject(signal!.reason));
      const closed = () => end(() => reject(new ClientClosedError()));
      const timer = setTimeout(() => end(resolve), ms);
      signal?.addEventListener('abort', aborted, { once: true });
      this.waits.add(closed);
    });
  }

  /** Cancels the calls in flight and ends the waits (they reject with `ClientClosedError`), and closes the connections. */
  close(): void {
    this.closed = true;
    for (const call of [...this.#inFlight]) {
      call.cancel();
    }
    for (const closed of [...this.waits]) {
      closed();
    }
    for (const endpoint of this.endpoints) {
      endpoint.client.close();
    }
  }
}
