// Credentials and quota waits (clients/README.md, "Credentials" and "Quota waits") against real
// servers started with a tenants' policy: the token on every attempt of every call, refusals
// returned after one attempt, a quota refusal's delay waited out on the same endpoint or, when
// the call cannot use it, returned at once; and a token that is never shown.
import { Metadata, status as Status, type ServiceError } from '@grpc/grpc-js';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, describe, test } from 'node:test';
import { inspect } from 'node:util';

import {
  ClientClosedError,
  RejectedError,
  SnowmintClient,
  UnavailableError,
  decode,
  type ClientOptions,
} from '../src/index.js';
import { quotaDelayMs } from '../src/endpoints.js';
import { SnowmintServer, binary } from './server.js';

const TIMEOUT = { timeout: 60_000 };

/**
 * A policy and its token file in a temp dir: tenant a (IDs, UUIDs and sequences, at 5 a second,
 * one at once), b (UUIDs only) and c (everything, no limit); `flags` for `snowmint serve`.
 */
function tenants() {
  const dir = mkdtempSync(join(tmpdir(), 'snowmint-ts-tenants-'));
  const tokens: Record<string, string> = {};
  const lines: string[] = [];
  for (const name of ['a', 'b', 'c']) {
    const [token, line] = execFileSync(binary(), ['token', 'new', name], { encoding: 'utf8' }).split('\n');
    tokens[name] = token!;
    lines.push(line!);
  }
  writeFileSync(join(dir, 'tokens'), `${lines.join('\n')}\n`);
  writeFileSync(
    join(dir, 'policy.toml'),
    `[tenant.a]
tokens = ["a"]
allow = ["ids", "uuids", "sequences"]
rate = 5
burst = 1

[tenant.b]
tokens = ["b"]
allow = ["uuids"]

[tenant.c]
tokens = ["c"]
allow = ["ids", "uuids", "sequences"]
`,
  );
  return {
    a: tokens.a!,
    b: tokens.b!,
    c: tokens.c!,
    flags: ['--policy-file', join(dir, 'policy.toml'), '--token-file', join(dir, 'tokens')],
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}

/** Servers and clients made by a test, closed in its `after` hook whatever happened. */
function resources() {
  const policy = tenants();
  const servers: SnowmintServer[] = [];
  const clients: SnowmintClient[] = [];
  after(async () => {
    clients.forEach((c) => c.close());
    await Promise.all(servers.map((s) => s.close()));
    policy.remove();
  });
  return {
    policy,
    /** A server under the policy. */
    async server(workerId: number, how: { refusing?: boolean; sequences?: Record<string, string[]> } = {}) {
      const server = await (how.refusing
        ? SnowmintServer.startRefusing(workerId, ...policy.flags)
        : how.sequences
          ? SnowmintServer.startWithSequences(workerId, how.sequences, ...policy.flags)
          : SnowmintServer.start(workerId, ...policy.flags));
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

/** A server's count of gRPC `method` calls answered with `code` (as its metrics name it). */
function calls(server: SnowmintServer, method: string, code: string): Promise<number> {
  return server.metric(`snowmint_requests_total{code="${code}",method="${method}",protocol="grpc"}`);
}

/** A server's count of calls refused `UNAUTHENTICATED`, of every method and reason (not in `calls`). */
async function unauthenticated(server: SnowmintServer): Promise<number> {
  const reasons = ['missing', 'bad_header', 'unknown_token', 'no_tenant', 'two_tenants'];
  const counts = await Promise.all(reasons.map((reason) => server.metric(`snowmint_unauthenticated_calls_total{reason="${reason}"}`)));
  return counts.reduce((a, b) => a + b, 0);
}

/** A server's count of gRPC `method` calls it let through, whatever their answers. */
async function allCalls(server: SnowmintServer, method: string): Promise<number> {
  const codes = ['OK', 'PermissionDenied', 'ResourceExhausted', 'InvalidArgument', 'Unavailable'];
  const counts = await Promise.all(codes.map((code) => calls(server, method, code)));
  return counts.reduce((a, b) => a + b, 0);
}

function rejectedWith(code: Status) {
  return (error: unknown) => {
    assert.ok(error instanceof RejectedError, String(error));
    assert.equal(error.code, code, `${Status[error.code]}, want ${Status[code]}: ${error.message}`);
    return true;
  };
}

describe('a token', () => {
  const r = resources();

  test('is carried by every attempt of every call', TIMEOUT, async () => {
    const server = await r.server(60, { sequences: { orders: [] } });
    const token = r.policy.c;
    const client = r.client([server.url], { token });
    assert.equal(decode(await client.nextId()).workerId, 60);
    assert.equal((await Promise.all([client.nextId(), client.nextId(), client.nextId()])).length, 3); // shared: a BatchIds
    assert.equal((await client.batch(5)).length, 5);
    assert.equal((await client.nextUuid()).version, 7);
    assert.equal((await client.batchUuids(3)).length, 3);
    assert.equal(await client.nextValue('orders'), 1n);
    assert.deepEqual(await client.batchValues('orders', 2), [2n, 3n]);
    // The buffer's refills and the sequence prefetch's.
    const buffered = r.client([server.url], { token, buffer: true, sequencePrefetch: 10 });
    assert.equal(decode(await buffered.nextId()).workerId, 60);
    assert.equal(await buffered.nextValue('orders'), 4n);
    for (const method of ['NextId', 'BatchIds', 'NextUuid', 'BatchUuids', 'NextValue', 'BatchValues']) {
      assert.ok((await calls(server, method, 'OK')) >= 1, method);
    }
    assert.equal(await unauthenticated(server), 0);
    // Without it, the same server refuses each call.
    const anonymous = r.client([server.url]);
    await assert.rejects(anonymous.nextId(), rejectedWith(Status.UNAUTHENTICATED));
    await assert.rejects(anonymous.nextUuid(), rejectedWith(Status.UNAUTHENTICATED));
    await assert.rejects(anonymous.nextValue('orders'), rejectedWith(Status.UNAUTHENTICATED));
    assert.equal(await unauthenticated(server), 3);
  });

  test('is carried by the attempts after a failover too', TIMEOUT, async () => {
    // The refusing server refuses the token's calls with UNAVAILABLE (a call without one is
    // UNAUTHENTICATED there); the good one serves them only with the token.
    const refusing = await r.server(61, { refusing: true });
    const good = await r.server(62);
    const client = r.client([refusing.url, good.url], { token: r.policy.c });
    assert.equal(decode(await client.nextId()).workerId, 62);
    assert.equal(await calls(refusing, 'NextId', 'Unavailable'), 1);
    const fresh = r.client([refusing.url, good.url], { token: r.policy.c });
    assert.equal((await fresh.nextUuid()).version, 7);
    assert.equal(await calls(refusing, 'NextUuid', 'Unavailable'), 1);
    assert.equal(await unauthenticated(refusing) + await unauthenticated(good), 0);
  });

  test('wrong or missing: UNAUTHENTICATED after one attempt, not failed over', TIMEOUT, async () => {
    const first = await r.server(63);
    const second = await r.server(64);
    const wrong = `${r.policy.a.slice(0, -4)}zzzz`;
    for (const options of [{ token: wrong }, {}]) {
      const client = r.client([first.url, second.url], options);
      await assert.rejects(client.batch(1), (error: unknown) => {
        rejectedWith(Status.UNAUTHENTICATED)(error);
        assert.ok(!(error as Error).message.includes(wrong), 'the token in the error');
        return true;
      });
    }
    assert.equal(await unauthenticated(first), 2);
    assert.equal(await unauthenticated(second) + await allCalls(second, 'BatchIds'), 0, 'a refusal was tried on the other endpoint');
  });

  test('of a tenant that may not: PERMISSION_DENIED after one attempt', TIMEOUT, async () => {
    const first = await r.server(65);
    const second = await r.server(66);
    const client = r.client([first.url, second.url], { token: r.policy.b });
    await assert.rejects(client.nextId(), rejectedWith(Status.PERMISSION_DENIED));
    await assert.rejects(client.batch(2), rejectedWith(Status.PERMISSION_DENIED));
    assert.equal((await client.batchUuids(2)).length, 2, 'tenant b may mint UUIDs');
    assert.equal(await calls(first, 'NextId', 'PermissionDenied'), 1);
    assert.equal(await allCalls(second, 'NextId') + await allCalls(second, 'BatchIds'), 0);
  });

  test('that is not 1 to 4,096 visible ASCII characters is refused, unseen', () => {
    const bad = ['', 'secret-token with-a-space', 'S'.repeat(4097), 'secret-token\n', 'secret-tokén', 'secret-token\t', '\u007f'];
    for (const token of bad) {
      assert.throws(() => new SnowmintClient(['127.0.0.1:1'], { token }), (error: unknown) => {
        assert.ok(error instanceof RangeError, String(error));
        assert.match(error.message, /token/);
        if (token !== '') {
          assert.ok(!error.message.includes(token.length > 100 ? 'SSSSSSSS' : 'secret-token') && !error.message.includes(token));
        }
        return true;
      });
    }
    assert.throws(() => new SnowmintClient(['127.0.0.1:1'], { token: 42 as unknown as string }), RangeError);
    new SnowmintClient(['127.0.0.1:1'], { token: '!'.repeat(4096) }).close();
    new SnowmintClient(['127.0.0.1:1'], { token: '~' }).close();
  });

  test('never shows in the client’s printed form', TIMEOUT, async () => {
    const server = await r.server(67);
    const token = r.policy.c;
    const client = r.client([server.url], { token, buffer: true });
    const shown = () => [String(client), `${client}`, inspect(client, { depth: Infinity, showHidden: true })];
    await client.nextId();
    await server.pause();
    const inFlight = client.batch(3).catch((e: unknown) => e);
    await sleep(50);
    const printed = shown();
    server.resume();
    await inFlight;
    printed.push(...shown());
    for (const text of printed) {
      assert.ok(!text.includes(token), `the token shows in ${text.slice(0, 200)}`);
    }
  });
});

describe('a quota refusal', () => {
  const r = resources();

  test('is waited out, and the next attempt succeeds', TIMEOUT, async () => {
    const server = await r.server(70);
    const client = r.client([server.url], { token: r.policy.a });
    await client.batch(1); // the one the bucket held
    const start = performance.now();
    const ids = await client.batch(1);
    const took = performance.now() - start;
    assert.equal(ids.length, 1);
    assert.ok(took >= 100, `took ${took} ms: no wait`);
    assert.ok(took < 1000, `took ${took} ms`);
    assert.equal(await calls(server, 'BatchIds', 'ResourceExhausted'), 1);
    assert.equal(await calls(server, 'BatchIds', 'OK'), 2);
  });

  test('without an attempt left, or with too little time, is returned at once', TIMEOUT, async () => {
    const server = await r.server(71);
    const client = r.client([server.url], { token: r.policy.a });
    await client.batch(1);
    // The caller's deadline is nearer than the delay (about 200 ms).
    let start = performance.now();
    await assert.rejects(client.batch(1, { timeoutMs: 150 }), (error: unknown) => {
      rejectedWith(Status.RESOURCE_EXHAUSTED)(error);
      const { retryDelayMs } = error as RejectedError;
      assert.ok(retryDelayMs !== undefined && retryDelayMs > 100 && retryDelayMs <= 200, `retryDelayMs ${retryDelayMs}`);
      return true;
    });
    let took = performance.now() - start;
    assert.ok(took < 140, `took ${took} ms: it waited`);

    // One attempt only.
    await sleep(250);
    const once = r.client([server.url], { token: r.policy.a, attempts: 1 });
    await once.batch(1);
    start = performance.now();
    await assert.rejects(once.nextUuid(), (error: unknown) => {
      rejectedWith(Status.RESOURCE_EXHAUSTED)(error);
      assert.ok((error as RejectedError).retryDelayMs! > 100);
      return true;
    });
    took = performance.now() - start;
    assert.ok(took < 160, `took ${took} ms: it waited (about 200 ms)`);

    // Refused again after its wait, with no attempt left: returned as it is.
    await sleep(250);
    const busy = r.client([server.url], { token: r.policy.a });
    await busy.batch(1);
    const [first, second] = await Promise.allSettled([busy.batch(1), busy.batch(1)]);
    const outcomes = [first, second].map((s) => (s.status === 'fulfilled' ? 'ok' : Status[(s.reason as RejectedError).code]));
    assert.deepEqual(outcomes.sort(), ['RESOURCE_EXHAUSTED', 'ok'], String(outcomes));
  });

  test('stays on its endpoint: the other gets no calls', TIMEOUT, async () => {
    const first = await r.server(72);
    const second = await r.server(73);
    const client = r.client([first.url, second.url], { token: r.policy.a });
    assert.equal(decode((await client.batch(1))[0]!).workerId, 72);
    const start = performance.now();
    assert.equal(decode((await client.batch(1))[0]!).workerId, 72);
    assert.ok(performance.now() - start >= 100, 'no wait');
    assert.equal(decode((await client.batch(1))[0]!).workerId, 72, 'the current endpoint moved');
    assert.equal(await calls(first, 'BatchIds', 'ResourceExhausted'), 2);
    assert.equal(await allCalls(second, 'BatchIds'), 0, 'the second endpoint got calls');
  });

  test('a wait ends at once on close() and on the caller’s abort', TIMEOUT, async () => {
    const server = await r.server(74);
    for (const how of ['close', 'abort']) {
      await sleep(250);
      const client = r.client([server.url], { token: r.policy.a, attempts: 50 });
      await client.batch(1);
      const controller = new AbortController();
      const refused = await calls(server, 'BatchIds', 'ResourceExhausted');
      const waiting = client.batch(1, { signal: controller.signal }).catch((e: unknown) => e);
      // Refused within a moment, and waiting (about 200 ms).
      for (let i = 0; i < 100 && (await calls(server, 'BatchIds', 'ResourceExhausted')) === refused; i++) {
        await sleep(2);
      }
      assert.equal(await calls(server, 'BatchIds', 'ResourceExhausted'), refused + 1, 'not refused');
      const start = performance.now();
      if (how === 'close') {
        client.close();
      } else {
        controller.abort(new Error('no longer needed'));
      }
      const error = await waiting;
      assert.ok(performance.now() - start < 100, `ended ${performance.now() - start} ms after`);
      if (how === 'close') {
        assert.ok(error instanceof ClientClosedError, String(error));
      } else {
        assert.match(String(error), /no longer needed/);
      }
    }
  });

  test('the delay is read from the status details of the error', () => {
    // google.rpc.Status { code 8, message "over quota", details [Any { RetryInfo { 200,000,000 ns } }] }.
    const blob = Buffer.from(
      '0808120a6f7665722071756f74611a330a28747970652e676f6f676c65617069732e636f6d2f676f6f676c652e7270632e5265747279496e666f12070a05108084af5f',
      'hex',
    );
    const metadata = new Metadata();
    metadata.set('grpc-status-details-bin', blob);
    const refusal = (code: Status) => Object.assign(new Error('refused'), { code, details: 'refused', metadata }) as ServiceError;
    assert.equal(quotaDelayMs(refusal(Status.RESOURCE_EXHAUSTED)), 200);
    assert.equal(quotaDelayMs(refusal(Status.UNAVAILABLE)), undefined);
    assert.equal(quotaDelayMs(Object.assign(refusal(Status.RESOURCE_EXHAUSTED), { metadata: new Metadata() })), undefined);
    const garbage = new Metadata();
    garbage.set('grpc-status-details-bin', Buffer.from([0x1a, 0x80]));
    assert.equal(quotaDelayMs(Object.assign(refusal(Status.RESOURCE_EXHAUSTED), { metadata: garbage })), undefined);
  });
});

describe('without a policy', () => {
  test('a RESOURCE_EXHAUSTED without a RetryInfo is returned as it is', () => {
    const refusal = Object.assign(new Error('saturated'), {
      code: Status.RESOURCE_EXHAUSTED,
      details: 'saturated',
      metadata: new Metadata(),
    }) as ServiceError;
    assert.equal(quotaDelayMs(refusal), undefined);
  });

  test('a token is harmless', TIMEOUT, async () => {
    const server = await SnowmintServer.start(75);
    const client = new SnowmintClient([server.url], { token: 'smt_anything' });
    const nowhere = new SnowmintClient(['127.0.0.1:1'], { token: 'x', attempts: 1, timeoutMs: 200 });
    after(async () => {
      client.close();
      nowhere.close();
      await server.close();
    });
    assert.equal((await client.batch(2)).length, 2);
    await assert.rejects(nowhere.nextId(), UnavailableError);
  });
});
