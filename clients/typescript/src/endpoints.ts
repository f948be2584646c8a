/**
 * The connections, and the contract's rule for moving between them (clients/README.md). All
 * calls go to one current endpoint. An attempt that is refused (`UNAVAILABLE`), fails in
 * transport (also `UNAVAILABLE` in grpc-js) or gets no answer within its own deadline moves the
 * current endpoint to the next; every other error returns as it is, and an attempt cut short by
 * the caller's own deadline ends the call and moves nothing. Once every endpoint was tried in a
 * call, each further attempt waits first: 10 ms, doubling, at most 320 ms.
 */
import { Client, Metadata, credentials, status as Status, type ChannelOptions, type ServiceError } from '@grpc/grpc-js';
import { setTimeout as sleep } from 'node:timers/promises';

import { ClientClosedError, DeadlineExceededError, RejectedError, UnavailableError } from './errors.js';
import type { Bound, TlsOptions } from './options.js';
import { BATCH_IDS, NEXT_ID, batchIdsResponse, batchIdsRequest, identity, nextIdRequest, nextIdResponse } from './wire.js';

/**
 * grpc-js holds a connection that failed in a reconnect backoff (up to 120 s by default,
 * failing every call to it meanwhile); kept under half a second (plus a fifth of jitter), a
 * server that comes back is used again within a second.
 */
const CHANNEL_OPTIONS: ChannelOptions = {
  'grpc.initial_reconnect_backoff_ms': 100,
  'grpc.max_reconnect_backoff_ms': 500,
};

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

export class EndpointPool {
  private readonly endpoints: Endpoint[];
  /** Index of the endpoint to try first. */
  private current = 0;
  /** The calls in flight, cancelled by `close()`. */
  private readonly inFlight = new Set<{ cancel(): void }>();
  closed = false;

  constructor(
    addresses: readonly string[],
    private readonly timeoutMs: number,
    private readonly attempts: number,
    tls: TlsOptions | undefined,
  ) {
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

  /** The longest a call without a deadline of its own may take: every attempt's timeout. */
  get longestCallMs(): number {
    return this.timeoutMs * this.attempts;
  }

  /** One `NextId` call, failing over. */
  nextId(bound: Bound): Promise<bigint[]> {
    return this.fetch(undefined, bound);
  }

  /** One `BatchIds` call of `count`, failing over. */
  batch(count: number, bound: Bound): Promise<bigint[]> {
    return this.fetch(count, bound);
  }

  /** `BatchIds` of `count`, or `NextId` without one. */
  private async fetch(count: number | undefined, bound: Bound): Promise<bigint[]> {
    const { deadline, signal } = bound;
    const n = this.endpoints.length;
    let last: ServiceError | undefined;
    let lastAddress = '';
    for (let attempt = 0; attempt < this.attempts; attempt++) {
      const pause = pauseBefore(attempt, n);
      if (pause > 0) {
        if (deadline !== undefined && performance.now() + pause >= deadline) {
          await sleep(Math.max(0, deadline - performance.now()), undefined, signal ? { signal } : {}).catch(() =>
            signal?.throwIfAborted(),
          );
          throw new DeadlineExceededError();
        }
        await sleep(pause, undefined, signal ? { signal } : {}).catch(() => signal?.throwIfAborted());
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
      const index = this.current;
      const endpoint = this.endpoints[index]!;
      try {
        return await this.call(endpoint, count, attemptMs, signal);
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
        if (error.code !== Status.UNAVAILABLE && error.code !== Status.DEADLINE_EXCEEDED) {
          throw new RejectedError(`the server at ${endpoint.address} rejected the request: ${describe(error)}`, error.code, error.details);
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

  private call(endpoint: Endpoint, count: number | undefined, timeoutMs: number, signal?: AbortSignal): Promise<bigint[]> {
    const options = { deadline: Date.now() + timeoutMs };
    return new Promise((resolve, reject) => {
      let cancel: (() => void) | undefined;
      const done = (error: unknown, ids?: bigint[]) => {
        this.inFlight.delete(call);
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
        count === undefined
          ? endpoint.client.makeUnaryRequest(NEXT_ID, identity, nextIdResponse, nextIdRequest(), new Metadata(), options,
              (error, id) => done(error, error || id === undefined ? undefined : [id]))
          : endpoint.client.makeUnaryRequest(BATCH_IDS, identity, batchIdsResponse, batchIdsRequest(count), new Metadata(),
              options, (error, ids) => {
                if (error || !ids) {
                  done(error);
                } else if (ids.length !== count) {
                  // Callers are promised one ID each: a short reply must fail them, not strand them.
                  const details = `asked for ${count} IDs, got ${ids.length}`;
                  done(Object.assign(new Error(details), { code: Status.INTERNAL, details }));
                } else {
                  done(null, ids);
                }
              });
      this.inFlight.add(call);
      if (signal) {
        cancel = () => call.cancel();
        signal.addEventListener('abort', cancel, { once: true });
      }
    });
  }

  /** Cancels the calls in flight (they reject with `ClientClosedError`) and closes the connections. */
  close(): void {
    this.closed = true;
    for (const call of [...this.inFlight]) {
      call.cancel();
    }
    for (const endpoint of this.endpoints) {
      endpoint.client.close();
    }
  }
}
