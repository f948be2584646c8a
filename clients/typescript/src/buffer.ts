/**
 * The local buffer of prefetched IDs. It refills at the rate IDs are used, by the rule of
 * clients/README.md, the same in every client (`lead = maxAgeMs / 4`):
 *
 * - rate: IDs handed out per second, in windows of at least a lead;
 * - a refill is sent when, after dropping the stale batches, the IDs still fresh a lead from now
 *   plus those asked for by refills in flight are at most `mark = min(lowWater, rate × lead)` (or
 *   fewer than the callers waiting), fewer than `maxRefills` are in flight, none failed in the
 *   last 100 ms, and a caller waits or `mark ≥ 1`; it asks for
 *   `min(batch, max(rate × maxAge, mark + 1, callers waiting))` IDs;
 * - the decision ({@link PrefetchBuffer.decide}) is made when a caller finds the buffer empty,
 *   when a pop leaves `mark` or fewer buffered and on their way, when a refill ends, and a lead
 *   before the oldest batch goes stale.
 *
 * Every ID leaves the buffer once (the event loop has one thread): handed to one caller, or
 * dropped with its batch. A refill the server refuses for its count (`INVALID_ARGUMENT`) is
 * sent again for half as many; one that fails otherwise fails the callers waiting, and no
 * refill starts for 100 ms after it.
 */
import { status as Status } from '@grpc/grpc-js';

import type { EndpointPool } from './endpoints.js';
import { ClientClosedError, RejectedError } from './errors.js';
import { UNBOUNDED, type Bound } from './options.js';
import { waiter, type Waiter } from './waiter.js';

/** After a refill failed on every endpoint, no refill starts for this long (ms). */
const REFILL_PAUSE_MS = 100;
/** Calls served from the buffer between two turns given to the event loop while refills are in flight. */
const POPS_PER_YIELD = 256;

/** One fetched batch, handed out from `next` on. */
interface Batch {
  ids: bigint[];
  next: number;
  /** When its refill was sent, on the monotonic clock (ms): every ID in it was minted after. */
  sent: number;
}

export interface BufferSettings {
  batch: number;
  lowWater: number;
  maxRefills: number;
  maxAgeMs: number;
}

export class PrefetchBuffer {
  private readonly lead: number;
  /** By when their refills were sent, oldest first; the first is `front`. */
  private readonly batches: Batch[] = [];
  private front: Batch | undefined;
  /** When `front` goes stale (`performance.now()`). */
  private staleAt = 0;
  private waiting: Waiter[] = [];
  /** IDs in `batches`. */
  private buffered = 0;
  private refilling = 0;
  /** IDs the refills in flight asked for. */
  private asked = 0;
  private taken = 0;
  private windowStart = performance.now();
  private windowTaken = 0;
  private rate = 0;
  private mark = 0;
  /** Pops left before a decision is due. */
  private countdown = 0;
  /** The most a refill asks for: `batch`, halved by each `INVALID_ARGUMENT`. */
  private limit: number;
  /** No refill starts before this (`performance.now()`), after a failed one. */
  private pausedUntil = 0;
  private timer: NodeJS.Timeout | undefined;
  private timerAt = 0;
  /** Calls served from the buffer since the last turn given to the event loop. */
  private sinceYield = 0;
  private closed = false;

  constructor(
    private readonly pool: EndpointPool,
    private readonly settings: BufferSettings,
  ) {
    this.lead = settings.maxAgeMs / 4;
    this.limit = settings.batch;
  }

  /** One ID: at once from the buffer, or from the next refill when it is empty. */
  nextId(bound: Bound): Promise<bigint> {
    const front = this.front;
    if (front !== undefined && front.next < front.ids.length && performance.now() < this.staleAt) {
      const id = front.ids[front.next++]!;
      this.buffered--;
      this.taken++;
      if (--this.countdown <= 0) {
        this.decide(performance.now());
      }
      // A caller looping on IDs that are ready at once never gives the event loop a turn, so
      // the refills under way would neither be sent nor answered until the buffer runs dry.
      if (this.refilling > 0 && ++this.sinceYield >= POPS_PER_YIELD) {
        this.sinceYield = 0;
        return new Promise((resolve) => setImmediate(resolve, id));
      }
      return Promise.resolve(id);
    }
    return this.slow(bound);
  }

  private slow(bound: Bound): Promise<bigint> {
    if (this.closed) {
      return Promise.reject(new ClientClosedError());
    }
    const now = performance.now();
    this.dropStale(now);
    const front = this.front;
    if (front !== undefined) {
      const id = front.ids[front.next++]!;
      this.buffered--;
      this.taken++;
      if (--this.countdown <= 0) {
        this.decide(now);
      }
      return Promise.resolve(id);
    }
    const caller = waiter(bound, bound === UNBOUNDED ? this.pool.longestCallMs : undefined);
    this.waiting.push(caller);
    this.decide(now);
    return caller.promise;
  }

  /** Drops the batches used up or `maxAgeMs` old from the front, and sets `front`. */
  private dropStale(now: number): void {
    const maxAge = this.settings.maxAgeMs;
    while (this.batches.length > 0) {
      const first = this.batches[0]!;
      if (first.next < first.ids.length && now - first.sent < maxAge) {
        break;
      }
      this.buffered -= first.ids.length - first.next;
      this.batches.shift();
    }
    this.front = this.batches[0];
    this.staleAt = this.front === undefined ? 0 : this.front.sent + maxAge;
  }

  /** The rate rule: windows of at least a lead; a window under way raises the rate once its own count says more. */
  private measure(now: number): void {
    const elapsed = now - this.windowStart;
    const taken = this.taken - this.windowTaken;
    if (elapsed >= this.lead) {
      this.rate = (taken * 1000) / elapsed;
      this.windowStart = now;
      this.windowTaken = this.taken;
    } else {
      this.rate = Math.max(this.rate, (taken * 1000) / this.lead);
    }
  }

  /** Decides, sends the refills, and sets the timer of the next decision. */
  private decide(now: number): void {
    if (this.closed) {
      return;
    }
    const { maxAgeMs, lowWater, maxRefills } = this.settings;
    this.dropStale(now);
    this.measure(now);
    this.waiting = this.waiting.filter((w) => !w.settled);
    const waiting = this.waiting.length;
    this.mark = Math.min(lowWater, Math.floor((this.rate * this.lead) / 1000));
    let ahead = this.asked;
    for (const batch of this.batches) {
      if (batch.sent + maxAgeMs > now + this.lead) {
        ahead += batch.ids.length - batch.next;
      }
    }
    // Fetch ahead only when an ID will be used within the lead; else a prefetched ID would
    // mostly go stale unused.
    const wanted = (waiting > 0 || this.mark >= 1) && now >= this.pausedUntil;
    while (wanted && this.refilling < maxRefills && (ahead <= this.mark || ahead < waiting)) {
      const byRate = Math.ceil((this.rate * maxAgeMs) / 1000);
      const n = Math.max(1, Math.min(this.limit, Math.max(byRate, this.mark + 1, waiting - ahead)));
      this.refilling++;
      this.asked += n;
      ahead += n;
      this.pool.batch(n, UNBOUNDED).then(
        (ids) => this.arrived(n, now, ids),
        (error) => this.failed(n, error),
      );
    }
    // Pops before the next decision: until the mark is reached; none while every refill is in
    // flight (the next to end decides).
    this.countdown = this.refilling >= maxRefills ? Infinity : Math.max(1, this.buffered + this.asked - this.mark);
    let wakeAt: number | undefined;
    for (const batch of this.batches) {
      if (batch.sent + maxAgeMs - this.lead > now) {
        wakeAt = batch.sent + maxAgeMs - this.lead;
        break;
      }
    }
    if (waiting > 0 && this.pausedUntil > now && (wakeAt === undefined || this.pausedUntil < wakeAt)) {
      wakeAt = this.pausedUntil;
    }
    if (wakeAt !== undefined && (this.timer === undefined || wakeAt < this.timerAt)) {
      clearTimeout(this.timer);
      this.timerAt = wakeAt;
      this.timer = setTimeout(() => {
        this.timer = undefined;
        this.decide(performance.now());
      }, wakeAt - now);
      this.timer.unref();
    }
  }

  /** A refill of `asked` IDs sent at `sent` arrived: serve the waiting callers first, then buffer the rest. */
  private arrived(asked: number, sent: number, ids: bigint[]): void {
    this.refilling--;
    this.asked -= asked;
    if (this.closed) {
      return;
    }
    const batch: Batch = { ids, next: 0, sent };
    const waiting = this.waiting.filter((w) => !w.settled);
    const served = Math.min(waiting.length, ids.length);
    this.waiting = waiting.slice(served);
    for (let i = 0; i < served; i++) {
      waiting[i]!.resolve(ids[batch.next++]!);
    }
    this.taken += served;
    if (batch.next < ids.length) {
      let at = this.batches.length;
      while (at > 0 && this.batches[at - 1]!.sent > sent) {
        at--;
      }
      this.batches.splice(at, 0, batch);
      this.buffered += ids.length - batch.next;
    }
    this.decide(performance.now());
  }

  private failed(asked: number, error: unknown): void {
    this.refilling--;
    this.asked -= asked;
    if (this.closed) {
      return;
    }
    if (error instanceof RejectedError && error.code === Status.INVALID_ARGUMENT && asked > 1) {
      // Above the server's --max-batch: ask for half as many from now on.
      this.limit = Math.max(1, Math.min(this.limit, Math.floor(asked / 2)));
    } else {
      this.pausedUntil = performance.now() + REFILL_PAUSE_MS;
      for (const caller of this.waiting.splice(0)) {
        caller.reject(error);
      }
    }
    this.decide(performance.now());
  }

  /** Fails the callers waiting with `ClientClosedError` and drops every batch. */
  close(): void {
    this.closed = true;
    clearTimeout(this.timer);
    this.batches.length = 0;
    this.front = undefined;
    for (const caller of this.waiting.splice(0)) {
      caller.reject(new ClientClosedError());
    }
  }
}
