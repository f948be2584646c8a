/**
 * Unbuffered `nextId()` calls: every caller waiting while a call is in flight is served by the
 * next call, one `BatchIds` for all of them (`NextId` for one), as the Rust and Java clients do;
 * an optimization beyond the client contract. One call asks for at most 4,096 IDs; a server
 * whose `--max-batch` is lower answers `INVALID_ARGUMENT`, and the client then asks for half
 * as many, until the server accepts: no caller sees that answer.
 */
import { status as Status } from '@grpc/grpc-js';

import type { EndpointPool } from './endpoints.js';
import { RejectedError } from './errors.js';
import { UNBOUNDED, type Bound } from './options.js';
import { waiter, type Waiter } from './waiter.js';

/** The most IDs one shared call asks for unless a server's --max-batch says less. */
export const MAX_COALESCED = 4096;

export class Coalescer {
  private waiting: Waiter[] = [];
  private fetching = false;
  private limit = MAX_COALESCED;

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
      const waiting = this.waiting.filter((w) => !w.settled);
      const callers = waiting.slice(0, this.limit);
      this.waiting = waiting.slice(callers.length);
      if (callers.length === 0) {
        break;
      }
      try {
        const ids = callers.length === 1 ? await this.pool.nextId(UNBOUNDED) : await this.pool.batch(callers.length, UNBOUNDED);
        callers.forEach((caller, i) => caller.resolve(ids[i]!));
      } catch (error) {
        if (error instanceof RejectedError && error.code === Status.INVALID_ARGUMENT && callers.length > 1) {
          // Above the server's --max-batch: the same callers, in calls half as large.
          this.limit = Math.max(1, Math.floor(callers.length / 2));
          this.waiting = [...callers, ...this.waiting];
          continue;
        }
        callers.forEach((caller) => caller.reject(error));
      }
    }
    this.fetching = false;
  }
}
