// nextUuid() and batchUuids() against real snowmint processes: the UUIDs, and the failover,
// errors and bounds of the ID calls, which they share.
import { Server, ServerCredentials, status as Status, type sendUnaryData, type ServerUnaryCall } from '@grpc/grpc-js';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, describe, test } from 'node:test';

import {
  ClientClosedError,
  DeadlineExceededError,
  RejectedError,
  SnowmintClient,
  UnavailableError,
  Uuid,
  decode,
  decodeUuid,
  parseUuid,
  type ClientOptions,
} from '../src/index.js';
import { BATCH_UUIDS, NEXT_UUID, identity } from '../src/wire.js';
import { SnowmintServer } from './server.js';

const TIMEOUT = { timeout: 60_000 };

/** Servers and clients made by a test, closed in its `after` hook whatever happened. */
function resources() {
  const servers: SnowmintServer[] = [];
  const clients: SnowmintClient[] = [];
  const fakes: Server[] = [];
  after(async () => {
    clients.forEach((c) => c.close());
    fakes.forEach((f) => f.forceShutdown());
    await Promise.all(servers.map((s) => s.close()));
  });
  return {
    async server(workerId: number, ...extra: string[]) {
      const server = await SnowmintServer.start(workerId, ...extra);
      servers.push(server);
      return server;
    },
    async refusing(workerId: number) {
      const server = await SnowmintServer.startRefusing(workerId);
      servers.push(server);
      return server;
    },
    client(endpoints: string[], options: ClientOptions = {}) {
      const client = new SnowmintClient(endpoints, options);
      clients.push(client);
      return client;
    },
    /** A gRPC server on a free loopback port answering the UUID calls with `answer`'s bytes. */
    async fake(answer: (path: string, request: Buffer) => Buffer): Promise<string> {
      const fake = new Server();
      fakes.push(fake);
      for (const path of [NEXT_UUID, BATCH_UUIDS]) {
        fake.register(path, (call: ServerUnaryCall<Buffer, Buffer>, callback: sendUnaryData<Buffer>) =>
          callback(null, answer(path, call.request)), identity, identity, 'unary');
      }
      const port = await new Promise<number>((resolve, reject) =>
        fake.bindAsync('127.0.0.1:0', ServerCredentials.createInsecure(), (error, p) => (error ? reject(error) : resolve(p))));
      return `127.0.0.1:${port}`;
    },
  };
}

const requests = (code: string, method: string) => `snowmint_requests_total{code="${code}",method="${method}",protocol="grpc"}`;

function assertIncreasing(uuids: Uuid[]): void {
  for (let i = 1; i < uuids.length; i++) {
    assert.ok(uuids[i - 1]!.compare(uuids[i]!) < 0, `not increasing at ${i}: ${uuids[i - 1]} then ${uuids[i]}`);
  }
}

describe('UUIDs from a server', () => {
  const r = resources();
  test('nextUuid and batchUuids give v7 UUIDs of the server’s IDs, strictly increasing', TIMEOUT, async () => {
    const server = await r.server(21);
    const client = r.client([server.url]);
    const before = BigInt(Date.now());
    const first = await client.nextUuid();
    assert.ok(first instanceof Uuid);
    assert.equal(first.version, 7);
    assert.equal(first.bytes.length, 16);
    assert.match(first.toString(), /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    const decoded = decodeUuid(first);
    assert.equal(decoded.slot, 21);
    assert.ok(decoded.unixMs >= before - 5n && decoded.unixMs <= BigInt(Date.now()) + 5n, `minted at ${decoded.time}`);
    assert.ok(decoded.id > 2n ** 53n);
    assert.ok(parseUuid(first.toString()).equals(first));

    const one = await client.batchUuids(1);
    assert.equal(one.length, 1);
    const batch = await client.batchUuids(1000);
    assert.equal(batch.length, 1000);
    const last = await client.nextUuid();
    const all = [first, ...one, ...batch, last];
    assertIncreasing(all);
    const texts = all.map(String);
    assert.equal(new Set(texts).size, all.length, 'duplicate UUIDs');
    assert.deepEqual([...texts].sort(), texts, 'the text forms sort otherwise');
    const ids = all.map((u) => decodeUuid(u));
    for (let i = 1; i < ids.length; i++) {
      assert.ok(ids[i - 1]!.id < ids[i]!.id, `IDs not increasing at ${i}`);
      assert.equal(ids[i]!.slot, 21);
    }
    assert.deepEqual(
      [await server.metric(requests('OK', 'NextUuid')), await server.metric(requests('OK', 'BatchUuids'))],
      [2, 2],
    );
  });

  test('are never buffered nor shared: one call each, and a buffer sends nothing for them', TIMEOUT, async () => {
    const server = await r.server(22);
    const client = r.client([server.url], { buffer: true });
    const [a, b, c] = await Promise.all([client.nextUuid(), client.nextUuid(), client.nextUuid({ timeoutMs: 5000 })]);
    assert.equal(new Set([a, b, c].map(String)).size, 3);
    assert.equal((await client.batchUuids(5, { timeoutMs: 5000 })).length, 5);
    assert.deepEqual(
      [
        await server.metric(requests('OK', 'NextUuid')),
        await server.metric(requests('OK', 'BatchUuids')),
        await server.metric(requests('OK', 'BatchIds')),
        await server.metric(requests('OK', 'NextId')),
      ],
      [3, 1, 0, 0],
    );
  });
});

describe('UUID calls fail over', () => {
  const r = resources();
  test('past a refusing server, and alone it gives the unavailable error', TIMEOUT, async () => {
    const refusing = await r.refusing(23);
    const good = await r.server(24);
    const client = r.client([refusing.url, good.url]);
    assert.equal(decodeUuid(await client.nextUuid()).slot, 24);
    for (const uuid of await client.batchUuids(10)) {
      assert.equal(decodeUuid(uuid).slot, 24);
    }
    assert.ok((await refusing.metric(requests('Unavailable', 'NextUuid'))) >= 1);

    const alone = r.client([refusing.url], { timeoutMs: 300 });
    const start = performance.now();
    await assert.rejects(alone.nextUuid(), (error: unknown) => {
      assert.ok(error instanceof UnavailableError, String(error));
      assert.equal(error.code, Status.UNAVAILABLE);
      assert.equal(error.retriable, true);
      assert.match(error.message, /reservation/);
      return true;
    });
    await assert.rejects(alone.batchUuids(5), UnavailableError);
    assert.ok(performance.now() - start < 3000, 'took too long');
  });

  test('to a second endpoint when the first is down, as nextId does', TIMEOUT, async () => {
    const first = await r.server(25);
    const second = await r.server(26);
    const client = r.client([first.url, second.grpcAddr], { timeoutMs: 500 });
    assert.equal(decodeUuid(await client.nextUuid()).slot, 25, 'the first endpoint serves first');
    await first.kill();
    assert.equal(decodeUuid(await client.nextUuid()).slot, 26);
    assert.equal(decode(await client.nextId()).workerId, 26, 'nextId moved alike');
    for (const uuid of await client.batchUuids(20)) {
      assert.equal(decodeUuid(uuid).slot, 26);
    }

    // A client whose first endpoint was never up fails over on its first call.
    const down = r.client([first.url, second.url], { timeoutMs: 500 });
    assert.equal(decodeUuid(await down.nextUuid()).slot, 26);
  });
});

describe('UUID calls’ other errors', () => {
  const r = resources();
  test('a count the server refuses is its INVALID_ARGUMENT, not tried elsewhere', TIMEOUT, async () => {
    const first = await r.server(27, '--max-batch', '100');
    const second = await r.server(28);
    const client = r.client([first.url, second.url]);
    for (const count of [0, 101]) {
      await assert.rejects(client.batchUuids(count), (error: unknown) => {
        assert.ok(error instanceof RejectedError, String(error));
        assert.equal(error.code, Status.INVALID_ARGUMENT);
        assert.equal(error.retriable, false);
        assert.match(error.message, /count must be between 1 and/);
        return true;
      });
    }
    assert.equal((await client.batchUuids(100)).length, 100);
    const invalid = requests('InvalidArgument', 'BatchUuids');
    assert.equal(await first.metric(invalid), 2);
    assert.equal(await second.metric(invalid), 0, 'the bad request was tried on another endpoint');
    for (const count of [-1, 1.5, 2 ** 32, Number.NaN]) {
      await assert.rejects(client.batchUuids(count), RangeError, String(count));
    }
  });

  test('a malformed answer is the client’s error, INTERNAL, not tried elsewhere', TIMEOUT, async () => {
    const good = await r.server(29);
    const field = (bytes: Buffer) => Buffer.concat([Buffer.from([0x0a, bytes.length]), bytes]);
    // NextUuid: 15 bytes. BatchUuids of n: n - 1 UUIDs of 16 bytes, or n with one of 17.
    const short = await r.fake((path, request) => {
      const count = request.length === 0 ? 0 : request[1]!;
      if (path === NEXT_UUID) return field(Buffer.alloc(15, 1));
      return Buffer.concat(Array.from({ length: count - 1 }, () => field(Buffer.alloc(16, 1))));
    });
    const long = await r.fake((path, request) => {
      const count = request.length === 0 ? 0 : request[1]!;
      if (path === NEXT_UUID) return Buffer.alloc(0); // no uuid at all
      return Buffer.concat(Array.from({ length: count }, (_, i) => field(Buffer.alloc(i === 1 ? 17 : 16, 1))));
    });
    const internal = (pattern: RegExp) => (error: unknown) => {
      assert.ok(error instanceof RejectedError, String(error));
      assert.equal(error.code, Status.INTERNAL);
      assert.match(error.details, pattern);
      return true;
    };
    await assert.rejects(r.client([short, good.url]).nextUuid(), internal(/a UUID of 15 bytes, not 16/));
    await assert.rejects(r.client([short, good.url]).batchUuids(3), internal(/asked for 3 UUIDs, got 2/));
    await assert.rejects(r.client([long, good.url]).nextUuid(), internal(/a UUID of 0 bytes, not 16/));
    await assert.rejects(r.client([long, good.url]).batchUuids(3), internal(/a UUID of 17 bytes, not 16/));
    assert.equal(await good.metric(requests('OK', 'NextUuid')), 0, 'a malformed answer was tried on another endpoint');
    assert.equal(await good.metric(requests('OK', 'BatchUuids')), 0, 'a malformed answer was tried on another endpoint');
  });

  test('a closed client says so, for calls in flight too', TIMEOUT, async () => {
    const server = await r.server(30);
    const client = new SnowmintClient(server.url, { timeoutMs: 1000 });
    await client.nextUuid();
    await server.pause();
    try {
      const inFlight = [client.nextUuid(), client.batchUuids(10)];
      await sleep(100);
      client.close();
      for (const call of inFlight) {
        await assert.rejects(call, ClientClosedError);
      }
      await assert.rejects(client.nextUuid(), ClientClosedError);
      await assert.rejects(client.batchUuids(3), ClientClosedError);
    } finally {
      server.resume();
    }
  });
});

describe('a caller’s bounds on UUID calls', () => {
  const r = resources();
  test('a timeout bounds the whole call; an abort ends it at once', TIMEOUT, async () => {
    const refusing = await r.refusing(31);
    // Left alone, these calls would go on for 50 attempts of a second each.
    const client = r.client([refusing.url], { attempts: 50 });
    let start = performance.now();
    await assert.rejects(client.nextUuid({ timeoutMs: 300 }), (error: unknown) => {
      assert.ok(error instanceof DeadlineExceededError, String(error));
      assert.equal(error.code, Status.DEADLINE_EXCEEDED);
      assert.equal(error.retriable, true);
      return true;
    });
    const took = performance.now() - start;
    assert.ok(took >= 290 && took < 2000, `took ${took} ms`);
    await assert.rejects(client.batchUuids(5, { timeoutMs: 100 }), DeadlineExceededError);

    for (const call of [(signal: AbortSignal) => client.nextUuid({ signal }), (signal: AbortSignal) => client.batchUuids(5, { signal })]) {
      const controller = new AbortController();
      start = performance.now();
      const pending = call(controller.signal);
      setTimeout(() => controller.abort(new Error('no longer needed')), 100);
      await assert.rejects(pending, /no longer needed/);
      assert.ok(performance.now() - start < 1000);
    }
    await assert.rejects(client.nextUuid({ timeoutMs: 0 }), RangeError);
    await assert.rejects(client.batchUuids(1, { timeoutMs: -1 }), RangeError);
  });

  test('a caller’s deadline moves the client to no other endpoint', TIMEOUT, async () => {
    const [slow, other] = [await r.server(32), await r.server(33)];
    const client = r.client([slow.grpcAddr, other.grpcAddr], { timeoutMs: 5000 });
    assert.equal(decodeUuid(await client.nextUuid()).slot, 32);
    await slow.pause();
    try {
      for (let i = 0; i < 3; i++) {
        const late = await client.nextUuid({ timeoutMs: 100 }).catch((e: unknown) => e);
        assert.ok(late instanceof DeadlineExceededError, String(late));
      }
    } finally {
      slow.resume();
    }
    assert.equal(decodeUuid(await client.nextUuid()).slot, 32, 'a caller’s deadline moved the client');
  });
});
