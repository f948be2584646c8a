/** A caller waiting for one ID that another call is fetching: a shared call, or a refill. */
import { DeadlineExceededError, UnavailableError } from './errors.js';
import type { Bound } from './options.js';

/**
 * Settles once: served, failed, timed out or aborted; whoever serves waiters skips a settled
 * one.
 */
export class Waiter {
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

/**
 * The wait of a caller with `bound`: up to its deadline (then `DeadlineExceededError`), or
 * `defaultMs` without one (then `UnavailableError`), or for ever when that is undefined too.
 */
export function waiter(bound: Bound, defaultMs?: number): Waiter {
  if (bound.deadline !== undefined) {
    return new Waiter(bound.deadline - performance.now(), () => new DeadlineExceededError(), bound.signal);
  }
  return new Waiter(defaultMs, () => new UnavailableError(`no IDs arrived within ${defaultMs} ms`), bound.signal);
}
