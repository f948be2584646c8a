import { status as Status } from '@grpc/grpc-js';

/**
 * Why the client could not get IDs. Three kinds: {@link UnavailableError} (every attempt
 * failed: retry later), {@link DeadlineExceededError} (the call's own timeout passed: retry
 * later) and {@link RejectedError} (the server rejected the request itself: retrying will not
 * help). {@link ClientClosedError} stands apart: the client was closed.
 */
export abstract class SnowmintError extends Error {
  /** The gRPC status code of the error: `UNAVAILABLE` (14), `DEADLINE_EXCEEDED` (4), or the server's. */
  readonly code: Status;
  /** The status details the server (or the transport) gave. */
  readonly details: string;
  /** Whether the same request may succeed if tried again later. */
  abstract readonly retriable: boolean;

  constructor(message: string, code: Status, details: string) {
    super(message);
    this.name = new.target.name;
    this.code = code;
    this.details = details;
  }
}

/** The last attempt of a call that failed on every attempt: its code and details, for the log. */
export interface LastAttempt {
  readonly code: Status;
  readonly details: string;
}

/**
 * Every attempt failed over: refused (`UNAVAILABLE`: a server that cannot promise unique IDs
 * refuses rather than guess), failed in transport, or past its own timeout; or, with a buffer,
 * no IDs arrived in time. Its `code` is always `UNAVAILABLE`; `last` is what the last attempt
 * said. Retriable.
 */
export class UnavailableError extends SnowmintError {
  readonly retriable = true;
  readonly last: LastAttempt | undefined;

  constructor(message: string, last?: LastAttempt) {
    super(message, Status.UNAVAILABLE, last?.details ?? 'no IDs arrived in time');
    this.last = last;
  }
}

/** The call's own timeout ({@link CallOptions.timeoutMs}) passed. Code `DEADLINE_EXCEEDED`. Retriable. */
export class DeadlineExceededError extends SnowmintError {
  readonly retriable = true;

  constructor(message = "the call's timeout passed") {
    super(message, Status.DEADLINE_EXCEEDED, message);
  }
}

/**
 * The server rejected the request itself, e.g. `INVALID_ARGUMENT` for a batch count of 0 or
 * above the server's maximum. Returned as the server said it, without trying another
 * endpoint, since every endpoint would answer the same.
 */
export class RejectedError extends SnowmintError {
  readonly retriable = false;
  /**
   * For a refusal over the tenant's quota (`RESOURCE_EXHAUSTED`), the delay its `RetryInfo`
   * gave, in ms: the call ended without waiting it out (no attempt left, or too little time),
   * and a call after it may succeed. `undefined` otherwise.
   */
  readonly retryDelayMs: number | undefined;

  constructor(message: string, code: Status, details: string, retryDelayMs?: number) {
    super(message, code, details);
    this.retryDelayMs = retryDelayMs;
  }
}

/** A call on a client after {@link SnowmintClient.close}, or one that was waiting on it then. */
export class ClientClosedError extends Error {
  constructor() {
    super('the snowmint client is closed');
    this.name = 'ClientClosedError';
  }
}
