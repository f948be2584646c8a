// The rules of clients/README.md that every client keeps alike, against real servers (issue 30):
// the two errors a call ends with, TLS settings, what each call sends, a caller's deadline
// that moves nothing, shared calls within a lower --max-batch, and the rate-of-use buffer.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, describe, test } from 'node:test';

import {
  DeadlineExceededError,
  SnowmintClient,
  UnavailableError,
  decode,
  type ClientOptions,
} from '../src/index.js';
import { SnowmintServer } from './server.js';

const TIMEOUT = { timeout: 60_000 };

function resources() {
  const servers: SnowmintServer[] = [];
  const clients: SnowmintClient[] = [];
  after(async () => {
    clients.forEach((c) => c.close());
    await Promise.all(servers.map((s) => s.close()));
  });
  return {
    async server(workerId: number, ...extra: string[]) {
      const server = await SnowmintServer.start(workerId, ...extra);
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

const OK_NEXT = 'snowmint_requests_total{code="OK",method="NextId",protocol="grpc"}';
const OK_BATCH = 'snowmint_requests_total{code="OK",method="BatchIds",protocol="grpc"}';

describe('the two errors', () => {
  const r = resources();
  test('every attempt failing is UNAVAILABLE; the caller’s timeout is DEADLINE_EXCEEDED', TIMEOUT, async () => {
    const hung = await r.server(40);
    await hung.pause();
    for (const buffer of [false, true]) {
      const options = { timeoutMs: 200, attempts: 2, buffer };
      const failed = await r.client([hung.grpcAddr], options).nextId().catch((e: unknown) => e);
      assert.ok(failed instanceof UnavailableError, `buffered ${buffer}: ${failed}`);
      assert.equal(failed.code, 14, `buffered ${buffer}: code ${failed.code}, want UNAVAILABLE`);
      const late = await r.client([hung.grpcAddr], options).nextId({ timeoutMs: 150 }).catch((e: unknown) => e);
      assert.ok(late instanceof DeadlineExceededError, `buffered ${buffer}: ${late}`);
      assert.equal(late.code, 4);
      assert.ok(late.retriable);
    }
  });
});

describe('calls', () => {
  const r = resources();
  test('batch(1) is one BatchIds; a buffer sends nothing before it is used', TIMEOUT, async () => {
    const server = await r.server(41);
    const client = r.client([server.grpcAddr]);
    await client.nextId();
    assert.deepEqual([await server.metric(OK_NEXT), await server.metric(OK_BATCH)], [1, 0]);
    assert.equal((await client.batch(1)).length, 1);
    assert.deepEqual([await server.metric(OK_NEXT), await server.metric(OK_BATCH)], [1, 1]);
    const buffered = r.client([server.grpcAddr], { buffer: true });
    await sleep(300);
    assert.equal(await server.metric(OK_BATCH), 1, 'a buffered client fetched IDs before it was used');
    await buffered.nextId();
    assert.ok((await server.metric(OK_BATCH)) >= 2, 'a buffered nextId() sent no BatchIds');
  });
});

describe('a caller’s deadline', () => {
  const r = resources();
  test('moves the client to no other endpoint', TIMEOUT, async () => {
    const [slow, other] = [await r.server(42), await r.server(43)];
    const client = r.client([slow.grpcAddr, other.grpcAddr], { timeoutMs: 5000 });
    assert.equal(decode((await client.batch(1))[0]!).workerId, 42);
    await slow.pause();
    for (let i = 0; i < 3; i++) {
      const late = await client.batch(2, { timeoutMs: 100 }).catch((e: unknown) => e);
      assert.ok(late instanceof DeadlineExceededError, String(late));
    }
    slow.resume();
    assert.equal(decode((await client.batch(2))[0]!).workerId, 42, 'a caller’s deadline moved the client');
  });
});

describe('a server with --max-batch 100', () => {
  const r = resources();
  test('serves bursts of unbuffered nextId() and a buffer of 4096', TIMEOUT, async () => {
    const server = await r.server(44, '--max-batch', '100');
    for (const buffer of [false, true]) {
      const client = r.client([server.grpcAddr], { buffer });
      const ids = await Promise.all(Array.from({ length: 300 }, () => client.nextId()));
      assert.equal(new Set(ids).size, 300);
    }
  });
});

describe('the buffer', () => {
  const r = resources();
  test('refills at the rate of use: 10 IDs a second mint a small multiple of that', TIMEOUT, async () => {
    const server = await r.server(45);
    const client = r.client([server.grpcAddr], { buffer: true });
    const ids: bigint[] = [];
    const start = performance.now();
    for (let n = 0; n < 40; n++) {
      await sleep(Math.max(0, start + n * 100 - performance.now()));
      ids.push(await client.nextId());
    }
    assert.equal(new Set(ids).size, 40);
    const minted = await server.metric('snowmint_ids_issued_total');
    assert.ok(minted <= 3 * 40 + 20, `${minted} IDs minted for 40 used in 4 s`);
  });
});

describe('mutual TLS', () => {
  const r = resources();
  const dir = mkdtempSync(join(tmpdir(), 'snowmint-ts-tls-'));
  after(() => rmSync(dir, { recursive: true, force: true }));
  test('a client with the CA and a client certificate gets IDs', TIMEOUT, async () => {
    const openssl = (...args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'ignore' });
    const key = (name: string) => openssl('genpkey', '-algorithm', 'EC', '-pkeyopt', 'ec_paramgen_curve:P-256', '-out', name);
    key('ca-key.pem');
    openssl('req', '-x509', '-new', '-key', 'ca-key.pem', '-subj', '/CN=test CA', '-days', '2', '-out', 'ca.pem',
      '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign');
    for (const [name, ext] of [['server', 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth'],
      ['client', 'subjectAltName=DNS:client\nextendedKeyUsage=clientAuth']] as const) {
      key(`${name}-key.pem`);
      writeFileSync(join(dir, `${name}.ext`), `${ext}\n`);
      openssl('req', '-new', '-key', `${name}-key.pem`, '-subj', `/CN=${name}`, '-out', `${name}.csr`);
      openssl('x509', '-req', '-in', `${name}.csr`, '-CA', 'ca.pem', '-CAkey', 'ca-key.pem', '-CAcreateserial',
        '-days', '2', '-extfile', `${name}.ext`, '-out', `${name}.pem`);
    }
    const server = await r.server(46, '--tls-cert', join(dir, 'server.pem'), '--tls-key', join(dir, 'server-key.pem'),
      '--tls-client-ca', join(dir, 'ca.pem'));
    const pem = (name: string) => readFileSync(join(dir, name));
    const client = r.client([`https://${server.grpcAddr}`], {
      tls: { ca: pem('ca.pem'), cert: pem('client.pem'), key: pem('client-key.pem') },
    });
    assert.equal(decode(await client.nextId()).workerId, 46);
    assert.equal((await client.batch(5)).length, 5);
  });
});
