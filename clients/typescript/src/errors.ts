import { status as Status } from '@grpc/grpc-js';

/**
 * Why the client could not get IDs. Two kinds: {@link UnavailableError} (every endpoint
 * refused or failed: retry later) and {@link RejectedError} (the server rejected the request
 * itself: retrying will not help).
 */
export abstract class SnowmintError extends Error {
  /** The gRPC status code of the last call made. */
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

/**
 * Every attempt on every endpoint was refused (`UNAVAILABLE`: a server that cannot promise
 * unique IDs refuses rather than guess) or failed in transport. Retriable.
 */
export class UnavailableError extends SnowmintError {
  readonly retriable = true;
}

/**
 * The server rejected the request itself, e.g. `INVALID_ARGUMENT` for a batch count of 0 or
 * above the server's maximum. Returned as the server said it, without trying another
 * endpoint, since every endpoint would answer the same.
 */
export class RejectedError extends SnowmintError {
  readonly retriable = false;
}

/** A call on a client after {@link SnowmintClient.close}. */
export class ClientClosedError extends Error {
  constructor() {
    super('the snowmint client is closed');
    this.name = 'ClientClosedError';
  }
}
