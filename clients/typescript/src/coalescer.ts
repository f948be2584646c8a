/**
 * Unbuffered `nextId()` calls: every caller waiting while a call is in flight is served by the
 * next call, one `BatchIds` for all of them (`NextId` for one), as the Rust and Java clients do;
 * an optimization beyond the client contract. One call asks for at most 4,096 IDs; a server
 * whose `--max-batch` is lower answers `INVALID_ARGUMENT`, and the client then asks for half
 * as many, until the server accepts: no caller sees that answer. The shared call's deadline is
 * the latest of its callers' (none if one has none), so a quota wait none of them could use is
 * not waited: they get the refusal at once, as a call of their own would.
 */
import { status as Status } from '@grpc/grpc-js';

import type { EndpointPool } from './endpoints.js';
import { RejectedError } from './errors.js';
import { UNBOUNDED, type Bound } from './options.js';
import { waiter, type Waiter } from './waiter.js';

/** The most IDs one shared call asks for unless a server's --max-batch says less. */
export const MAX_COALESCED = 4096;

/** A caller waiting for its ID, and its own deadline (`performance.now()` ms), if any. */
interface Caller {
  waiter: Waiter;
  deadline: number | undefined;
}

/** The bounds of a call shared by `callers`: the latest of their deadlines, none if one has none. */
export function sharedBound(callers: readonly { deadline: number | undefined }[]): Bound {
  let latest = -Infinity;
  for (const { deadline } of callers) {
    if (deadline === undefined) {
      return UNBOUNDED;
    }
    latest = Math.max(latest, deadline);
  }
  return callers.length === 0 ? UNBOUNDED : { deadline: latest };
}

export class Coalescer {
  private waiting: Caller[] = [];
  private fetching = false;
  private limit = MAX_COALESCED;

  constructor(private readonly pool: EndpointPool) {}

  nextId(bound: Bound): Promise<bigint> {
    const caller = waiter(bound);
    this.waiting.push({ waiter: caller, deadline: bound.deadline });
    if (!this.fetching) {
      this.fetching = true;
      // After the current task: callers asking in the same burst share the first call too.
      queueMicrotask(() => void this.fetchForWaiting());
    }
    return caller.promise;
  }

  private async fetchForWaiting(): Promise<void> {
    for (;;) {
      const waiting = this.waiting.filter((w) => !w.waiter.settled);
      const callers = waiting.slice(0, this.limit);
      this.waiting = waiting.slice(callers.length);
      if (callers.length === 0) {
        break;
      }
      try {
        const bound = sharedBound(callers);
        const ids = callers.length === 1 ? await this.pool.nextId(bound) : await this.pool.batch(callers.length, bound);
        callers.forEach((caller, i) => caller.waiter.resolve(ids[i]!));
      } catch (error) {
        if (error instanceof RejectedError && error.code === Status.INVALID_ARGUMENT && callers.length > 1) {
          // Above the server's --max-batch: the same callers, in calls half as large.
          this.limit = Math.max(1, Math.floor(callers.length / 2));
          this.waiting = [...callers, ...this.waiting];
          continue;
        }
        callers.forEach((caller) => caller.waiter.reject(error));
      }
    }
    this.fetching = false;
  }
}
