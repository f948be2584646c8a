/**
 * The prefetch buffer of named sequences (`sequencePrefetch`), the contract of
 * clients/README.md: per sequence, values fetched ahead by one `BatchValues` and handed out one
 * by one by `nextValue()`.
 *
 * A caller that finds a sequence's buffer empty refills it; callers that come meanwhile wait
 * for that refill (each within its own deadline and signal), then take what it left, so no two
 * calls refill one sequence at once and no value goes to two callers. Until an answer has said
 * whether the sequence is ordered, a refill is one `NextValue`; an unordered sequence is
 * refilled by `BatchValues(n)`; an ordered one is never buffered (its values increase
 * fleet-wide in the order calls are answered, which buffering would break), so its callers make
 * one `NextValue` each. A refill that fails rejects with the error the direct call would; the
 * next caller tries again. A batch answered `OUT_OF_RANGE` (fewer values left than asked for)
 * is followed by one `NextValue`, so the last values of a sequence are still handed out.
 * `NOT_FOUND` forgets whether the sequence is ordered: it may be created again otherwise.
 */
import { status as Status } from '@grpc/grpc-js';

import { ClientClosedError, DeadlineExceededError, RejectedError } from './errors.js';
import type { Bound } from './options.js';
import type { SequenceAnswer } from './wire.js';

/** The most values one refill asks for: the server's default `--max-batch`. */
export const MAX_SEQUENCE_PREFETCH = 65536;

/** The calls a buffer is refilled with: one `NextValue`, one `BatchValues` of `count`. */
export interface SequenceCalls {
  readonly closed: boolean;
  nextValue(name: string, bound: Bound): Promise<SequenceAnswer>;
  batchValues(name: string, count: number, bound: Bound): Promise<SequenceAnswer>;
}

class SequenceBuffer {
  /** Undefined until an answer said. */
  ordered: boolean | undefined;
  /** Fetched and not yet handed out from `head` on, in the order they came (increasing within a refill). */
  values: bigint[] = [];
  head = 0;
  /** The refill under way, settled (never rejected) when it ends. */
  refill: Promise<void> | undefined;

  take(): bigint | undefined {
    if (this.head >= this.values.length) {
      return undefined;
    }
    return this.values[this.head++];
  }

  learn(answer: SequenceAnswer): bigint {
    this.ordered = answer.ordered;
    return answer.values[0]!;
  }

  failed(error: unknown): void {
    if (error instanceof RejectedError && error.code === Status.NOT_FOUND) {
      this.ordered = undefined;
    }
  }
}

/** @throws RangeError unless `n` is a whole number from 0 to {@link MAX_SEQUENCE_PREFETCH} */
export function checkSequencePrefetch(n: number): number {
  if (!Number.isInteger(n) || n < 0 || n > MAX_SEQUENCE_PREFETCH) {
    throw new RangeError(`sequencePrefetch must be a whole number from 0 (off) to ${MAX_SEQUENCE_PREFETCH}, the server's default --max-batch, got ${n}`);
  }
  return n;
}

/** The buffers of one client, one per sequence used. */
export class SequencePrefetch {
  private readonly sequences = new Map<string, SequenceBuffer>();

  constructor(
    private readonly calls: SequenceCalls,
    private readonly perRefill: number,
  ) {}

  async nextValue(name: string, bound: Bound): Promise<bigint> {
    let sequence = this.sequences.get(name);
    if (sequence === undefined) {
      sequence = new SequenceBuffer();
      this.sequences.set(name, sequence);
    }
    for (;;) {
      if (this.calls.closed) {
        throw new ClientClosedError(); // values left buffered are a gap
      }
      if (sequence.ordered === true) {
        return this.one(sequence, name, bound);
      }
      const value = sequence.take();
      if (value !== undefined) {
        return value;
      }
      if (sequence.refill === undefined) {
        return this.refill(sequence, name, bound);
      }
      await bounded(sequence.refill, bound);
    }
  }

  private async refill(sequence: SequenceBuffer, name: string, bound: Bound): Promise<bigint> {
    let ended!: () => void;
    sequence.refill = new Promise((resolve) => (ended = resolve));
    try {
      if (sequence.ordered === undefined) {
        return await this.one(sequence, name, bound);
      }
      let answer: SequenceAnswer;
      try {
        answer = await this.calls.batchValues(name, this.perRefill, bound);
      } catch (error) {
        if (error instanceof RejectedError && error.code === Status.OUT_OF_RANGE) {
          return await this.one(sequence, name, bound);
        }
        sequence.failed(error);
        throw error;
      }
      // Values of a batch answered ordered (the sequence made ordered since) are still this
      // client's alone: handed out from here, never twice.
      sequence.values = answer.values;
      sequence.head = 1;
      return sequence.learn(answer);
    } finally {
      sequence.refill = undefined;
      ended();
    }
  }

  private async one(sequence: SequenceBuffer, name: string, bound: Bound): Promise<bigint> {
    try {
      return sequence.learn(await this.calls.nextValue(name, bound));
    } catch (error) {
      sequence.failed(error);
      throw error;
    }
  }
}

/** Waits for `refill`, within the caller's deadline and signal. */
async function bounded(refill: Promise<void>, { deadline, signal }: Bound): Promise<void> {
  if (deadline === undefined && signal === undefined) {
    return refill;
  }
  signal?.throwIfAborted();
  let timer: NodeJS.Timeout | undefined;
  let onAbort: (() => void) | undefined;
  try {
    await new Promise<void>((resolve, reject) => {
      void refill.then(resolve);
      if (deadline !== undefined) {
        timer = setTimeout(() => reject(new DeadlineExceededError()), Math.max(0, deadline - performance.now()));
      }
      if (signal !== undefined) {
        onAbort = () => reject(signal.reason);
        signal.addEventListener('abort', onAbort, { once: true });
      }
    });
  } finally {
    clearTimeout(timer);
    if (onAbort) {
      signal?.removeEventListener('abort', onAbort);
    }
  }
}
