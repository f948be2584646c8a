// The client against real snowmint processes.
import { Client, Metadata, credentials, status as Status, type ServiceError } from '@grpc/grpc-js';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, describe, test } from 'node:test';

import {
  ClientClosedError,
  DeadlineExceededError,
  RejectedError,
  SnowmintClient,
  UnavailableError,
  decode,
  type ClientOptions,
} from '../src/index.js';
import { NEXT_ID, identity, nextIdRequest, nextIdResponse } from '../src/wire.js';
import { SnowmintServer } from './server.js';

const TIMEOUT = { timeout: 60_000 };

/** Servers and clients made by a test, closed in its `after` hook whatever happened. */
function resources() {
  const servers: SnowmintServer[] = [];
  const clients: SnowmintClient[] = [];
  after(async () => {
    clients.forEach((c) => c.close());
    await Promise.all(servers.map((s) => s.close()));
  });
  return {
    async server(workerId: number, refusing = false) {
      const server = await (refusing ? SnowmintServer.startRefusing(workerId) : SnowmintServer.start(workerId));
      servers.push(server);
      return server;
    },
    client(endpoints: string[], options: ClientOptions = {}) {
      const client = new SnowmintClient(endpoints, options);
      clients.push(client);
      return client;
    },
  };
}

/** A small buffer, so the tests go through many refills. */
const SMALL_BUFFER = { batch: 256, lowWater: 512 };

function assertIncreasing(ids: bigint[]): void {
  for (let i = 1; i < ids.length; i++) {
    assert.ok(ids[i - 1]! < ids[i]!, `batch not increasing at ${i}: ${ids[i - 1]} then ${ids[i]}`);
  }
}

function assertUnique(ids: bigint[]): void {
  const distinct = new Set(ids).size;
  assert.equal(distinct, ids.length, `${ids.length - distinct} duplicate IDs among ${ids.length}`);
}

for (const buffered of [false, true]) {
  describe(`concurrent callers, buffered = ${buffered}`, () => {
    const r = resources();
    test('get unique IDs; every batch strictly increasing', TIMEOUT, async () => {
      const server = await r.server(1);
      const client = r.client([server.url], buffered ? { buffer: SMALL_BUFFER } : {});
      const ids: bigint[] = [];
      await Promise.all(
        Array.from({ length: 16 }, async (_, task) => {
          for (let i = 0; i < 300; i++) {
            if ((task + i) % 3 === 0) {
              const batch = await client.batch(1 + (i % 50));
              assertIncreasing(batch);
              ids.push(...batch);
            } else {
              ids.push(await client.nextId());
            }
          }
        }),
      );
      assert.ok(ids.length > 16 * 300);
      assertUnique(ids);
      for (const id of ids) {
        assert.equal(typeof id, 'bigint');
        // Every ID is past 2^53: a trip through a number would have lost its low bits.
        assert.ok(id > 2n ** 53n);
        assert.equal(decode(id).workerId, 1);
      }
    });
  });
}

for (const buffered of [false, true]) {
  describe(`failover, buffered = ${buffered}`, () => {
    const r = resources();
    test('calls keep succeeding on the other server when one is SIGKILLed', TIMEOUT, async () => {
      const first = await r.server(1);
      const second = await r.server(2);
      // Both spellings of a plain-text endpoint.
      const client = r.client([first.url, second.grpcAddr], { timeoutMs: 500, ...(buffered ? { buffer: SMALL_BUFFER } : {}) });
      assert.equal(decode((await client.batch(1))[0]!).workerId, 1, 'the first endpoint serves first');
      const ids: bigint[] = [];
      const errors: unknown[] = [];
      let stop = false;
      const callers = Array.from({ length: 8 }, async (_, task) => {
        for (let i = 0; !stop; i++) {
          try {
            if ((task + i) % 3 === 0) {
              const batch = await client.batch(20);
              assertIncreasing(batch);
              ids.push(...batch);
            } else {
              ids.push(await client.nextId());
            }
          } catch (error) {
            errors.push(error);
          }
        }
      });
      try {
        await sleep(400);
        const before = ids.length;
        await first.kill();
        await sleep(800);
        assert.ok(ids.length > before, 'no IDs after the kill');
      } finally {
        stop = true;
        await Promise.all(callers);
      }
      assert.deepEqual(errors, [], `${errors.length} calls failed`);
      assertUnique(ids);
      assert.deepEqual(new Set(ids.map((id) => decode(id).workerId)), new Set([1, 2]), 'IDs from both servers');
      // Still served, by the survivor (a batch comes straight from a server; the buffer may
      // still hold valid IDs the killed one minted).
      assert.equal(decode((await client.batch(3))[0]!).workerId, 2);
    });
  });
}

describe('a refusing server', () => {
  const r = resources();
  test('is passed over; alone, it gives a clear retriable error', TIMEOUT, async () => {
    const refusing = await r.server(3, true);
    const good = await r.server(4);

    // It does refuse, as UNAVAILABLE.
    const raw = new Client(refusing.grpcAddr, credentials.createInsecure());
    try {
      const code = await new Promise<Status>((resolve) => {
        raw.makeUnaryRequest(NEXT_ID, identity, nextIdResponse, nextIdRequest(), new Metadata(),
          { deadline: Date.now() + 2000 }, (error: ServiceError | null) => resolve(error ? error.code : Status.OK));
      });
      assert.equal(code, Status.UNAVAILABLE);
    } finally {
      raw.close();
    }

    // Listed first, it is passed over for the good one.
    const client = r.client([refusing.url, good.url]);
    assert.equal(decode(await client.nextId()).workerId, 4);
    for (const id of await client.batch(10)) {
      assert.equal(decode(id).workerId, 4);
    }

    // Alone, a clear, retriable error within a bounded time, buffered or not.
    for (const buffer of [false, true]) {
      const alone = r.client([refusing.url], { timeoutMs: 300, buffer });
      const start = performance.now();
      await assert.rejects(alone.nextId(), (error: unknown) => {
        assert.ok(error instanceof UnavailableError, String(error));
        assert.equal(error.retriable, true);
        assert.equal(error.code, Status.UNAVAILABLE);
        assert.match(error.message, new RegExp(refusing.url));
        assert.match(error.message, /reservation/);
        return true;
      });
      assert.ok(performance.now() - start < 3000, 'took too long');
      await assert.rejects(alone.batch(5), UnavailableError);
    }
  });
});

describe('the buffer', () => {
  const r = resources();
  test('a caller looping on a down fleet does not hammer it', TIMEOUT, async () => {
    const refusing = await r.server(11, true);
    const client = r.client([refusing.url], { buffer: true });
    const until = performance.now() + 1000;
    let failures = 0;
    while (performance.now() < until) {
      await assert.rejects(client.nextId(), UnavailableError);
      failures++;
    }
    // After each failed refill, none starts for 100 ms: about ten refills of two attempts in
    // the second, where a caller looping without the pause makes hundreds.
    const calls = await refusing.metric('snowmint_requests_total{code="Unavailable",method="BatchIds",protocol="grpc"}');
    assert.ok(calls <= 60, `${calls} refused BatchIds calls in a second, ${failures} failures`);
    assert.ok(failures >= 3, `${failures} failures`);
  });

  test('drops IDs older than maxAge instead of handing them out', TIMEOUT, async () => {
    const server = await r.server(5);
    // No refill before the batch is used up: only the age limit can replace it.
    const client = r.client([server.url], { buffer: { batch: 100, lowWater: 0, maxRefills: 1, maxAgeMs: 200 } });
    const handedOut = new Set<bigint>();
    const first = await client.nextId();
    handedOut.add(first);
    for (let round = 1; round <= 3; round++) {
      await sleep(300); // past the age limit: the rest of the batch is stale
      const asked = BigInt(Date.now());
      const fresh = await client.nextId();
      const decoded = decode(fresh);
      // Minted after it was asked for, so from a new batch; the stale one is 300 ms older.
      assert.ok(decoded.unixMs >= asked - 2n, `ID from ${decoded.time}, asked at ${asked}`);
      assert.ok(decoded.unixMs - decode(first).unixMs >= BigInt(300 * round));
      assert.ok(!handedOut.has(fresh), `handed out twice: ${fresh}`);
      handedOut.add(fresh);
      for (let i = 0; i < 50; i++) {
        const id = await client.nextId();
        assert.ok(!handedOut.has(id), `handed out twice: ${id}`);
        handedOut.add(id);
      }
    }
  });
});

describe('other errors', () => {
  const r = resources();
  test('are returned as the server said them, not tried elsewhere', TIMEOUT, async () => {
    const first = await r.server(6);
    const second = await r.server(7);
    const client = r.client([first.url, second.url]);
    await assert.rejects(client.batch(0), (error: unknown) => {
      assert.ok(error instanceof RejectedError, String(error));
      assert.equal(error.code, Status.INVALID_ARGUMENT);
      assert.equal(error.retriable, false);
      assert.match(error.message, /count must be between 1 and/);
      return true;
    });
    const invalid = 'snowmint_requests_total{code="InvalidArgument",method="BatchIds",protocol="grpc"}';
    assert.equal(await first.metric(invalid), 1);
    assert.equal(await second.metric(invalid), 0, 'the bad request was tried on another endpoint');
    await assert.rejects(client.batch(-1), RangeError);
    await assert.rejects(client.batch(1.5), RangeError);
  });

  test('a closed client says so', TIMEOUT, async () => {
    const server = await r.server(8);
    const client = new SnowmintClient(server.url, { timeoutMs: 1000 });
    await client.nextId();
    // A call in flight when the client closes ends with the same error, not a server's.
    await server.pause();
    const inFlight = client.batch(10);
    await sleep(100);
    client.close();
    await assert.rejects(inFlight, ClientClosedError);
    await assert.rejects(client.nextId(), ClientClosedError);
    await assert.rejects(client.batch(3), ClientClosedError);
  });

  test('bad endpoints are refused at construction', () => {
    for (const endpoint of ['grpc://127.0.0.1:50051', 'http://127.0.0.1', '127.0.0.1', 'http://:50051', '127.0.0.1:port',
      'http://127.0.0.1:50051/path']) {
      assert.throws(() => new SnowmintClient(endpoint), (e: Error) => e instanceof TypeError && e.message.includes(endpoint));
    }
    assert.throws(() => new SnowmintClient([]), TypeError);
    new SnowmintClient(['127.0.0.1:1', 'http://[::1]:2', 'https://localhost:3']).close();
  });
});

describe('a caller\'s bounds', () => {
  const r = resources();
  test('a timeout bounds the whole call; an abort ends it at once', TIMEOUT, async () => {
    const refusing = await r.server(10, true);
    for (const buffer of [false, true]) {
      // Left alone, this call would go on for 50 attempts of a second each.
      const client = r.client([refusing.url], { attempts: 50, buffer });
      let start = performance.now();
      await assert.rejects(client.nextId({ timeoutMs: 300 }), (error: unknown) => {
        assert.ok(error instanceof DeadlineExceededError, String(error));
        assert.equal(error.code, Status.DEADLINE_EXCEEDED);
        assert.equal(error.retriable, true);
        return true;
      });
      const took = performance.now() - start;
      assert.ok(took >= 290 && took < 2000, `took ${took} ms`);
      await assert.rejects(client.batch(5, { timeoutMs: 100 }), DeadlineExceededError);

      const controller = new AbortController();
      start = performance.now();
      const call = client.nextId({ signal: controller.signal });
      setTimeout(() => controller.abort(new Error('no longer needed')), 100);
      await assert.rejects(call, /no longer needed/);
      assert.ok(performance.now() - start < 1000);
      await assert.rejects(client.nextId({ timeoutMs: 0 }), RangeError);
    }
  });
});
