/** The options of a client and of a call: the package's public settings. */

/** The local buffer's bounds; each defaults to every client's. The buffer refills at the rate IDs are used, within them. */
export interface BufferOptions {
  /** The most IDs one refill asks for (one `BatchIds` call). Default 4096. */
  batch?: number;
  /** The most IDs the buffer keeps ahead of use: buffered, and asked for by refills under way. Default 8192. */
  lowWater?: number;
  /** Refills in flight at once, to keep up with heavy use. Default 3. */
  maxRefills?: number;
  /**
   * A buffered batch this old (ms, counted from when its refill was sent) is dropped unused,
   * so the IDs a process hands out stay roughly time-sorted. Dropped IDs are gaps, never
   * duplicates. Default 1000.
   */
  maxAgeMs?: number;
}

/**
 * TLS settings of `https://` endpoints, as PEM text or bytes. Without them, servers are
 * verified against the system's roots.
 */
export interface TlsOptions {
  /** The CA (or CAs) to verify servers with, instead of the system's roots. */
  ca?: string | Buffer;
  /** A client certificate chain, for a server that asks for one (`--tls-client-ca`); with `key`. */
  cert?: string | Buffer;
  /** The client certificate's private key. */
  key?: string | Buffer;
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
  /**
   * Values of each unordered named sequence that `nextValue()` fetches ahead in one
   * `BatchValues` and hands out one by one (default 0: off, one `NextValue` per call); at most
   * 65536, the server's default `--max-batch`. Values still buffered when the client is closed
   * or the process ends are a gap, never handed out; buffered values leave the fleet-wide
   * order of the calls, and may wait long in an idle client. Ordered sequences are never
   * buffered.
   */
  sequencePrefetch?: number;
  /** TLS settings of `https://` endpoints. */
  tls?: TlsOptions;
  /**
   * A bearer token, for a server with a tenants' policy: every attempt of every call carries
   * it as `authorization: Bearer <token>` (gRPC metadata). 1 to 4,096 characters, each a
   * visible ASCII character (`!` to `~`); any other is refused with a `RangeError` that does
   * not show it. The client never shows it: not in an error, nor in its printed form. Over a
   * plain-text endpoint it crosses the network as it is: beyond loopback, use `https://`.
   */
  token?: string;
}

/** The longest token, in characters. */
const MAX_TOKEN_LENGTH = 4096;

/** Refuses a token the contract does not allow, with a message that never shows it. */
export function checkToken(token: unknown): asserts token is string {
  if (typeof token !== 'string') {
    throw new RangeError(`token must be a string, got a ${typeof token}`);
  }
  if (token.length < 1 || token.length > MAX_TOKEN_LENGTH) {
    throw new RangeError(`token must be 1 to ${MAX_TOKEN_LENGTH} characters, got ${token.length}`);
  }
  if (!/^[!-~]+$/.test(token)) {
    throw new RangeError("token must be visible ASCII characters ('!' to '~') only: no spaces, control or other characters");
  }
}

/** Bounds on one call, all of its attempts and pauses included. */
export interface CallOptions {
  /**
   * The most this call may take, in ms; past it, it rejects with `DeadlineExceededError`.
   * Each attempt gets the smaller of this and the client's timeout.
   */
  timeoutMs?: number;
  /** Aborting ends the call at once; it rejects with the signal's reason. */
  signal?: AbortSignal;
}

/** A call's bounds: its deadline on the monotonic clock (`performance.now()`), its signal. */
export interface Bound {
  deadline?: number;
  signal?: AbortSignal;
}

/** The bounds of a call with no options of its own: shared, as most calls have none. */
export const UNBOUNDED: Bound = Object.freeze({});

export function boundOf(options: CallOptions | undefined): Bound {
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
