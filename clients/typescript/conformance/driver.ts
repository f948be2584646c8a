/**
 * The TypeScript client's driver for the conformance suite (clients/conformance): reads one
 * JSON request a line on stdin and answers each on stdout once its call has ended, many at
 * once. The ops and the error kinds are described in clients/conformance/drivers.py.
 *
 *   node dist/conformance/driver.js
 */
import { readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';

import {
  ClientClosedError,
  DeadlineExceededError,
  OpaqueIdError,
  RejectedError,
  SnowmintClient,
  SnowmintError,
  UnavailableError,
  decode,
  formatOpaqueId,
  layout,
  opaqueId,
  parseOpaqueId,
  type ClientOptions,
  type FieldOrder,
} from '../src/index.js';

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

const clients = new Map<string, SnowmintClient>();

const CODES: Record<number, string> = {
  0: 'OK', 1: 'CANCELLED', 2: 'UNKNOWN', 3: 'INVALID_ARGUMENT', 4: 'DEADLINE_EXCEEDED', 5: 'NOT_FOUND',
  6: 'ALREADY_EXISTS', 7: 'PERMISSION_DENIED', 8: 'RESOURCE_EXHAUSTED', 9: 'FAILED_PRECONDITION', 10: 'ABORTED',
  11: 'OUT_OF_RANGE', 12: 'UNIMPLEMENTED', 13: 'INTERNAL', 14: 'UNAVAILABLE', 15: 'DATA_LOSS', 16: 'UNAUTHENTICATED',
};

/** The suite's form of an error: its kind, gRPC code and message. */
function errorOf(error: unknown): Json {
  const message = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  if (error instanceof SnowmintError) {
    const code = CODES[error.code] ?? String(error.code);
    let kind = 'other';
    if (error instanceof UnavailableError) {
      kind = 'unavailable';
    } else if (error instanceof DeadlineExceededError) {
      kind = 'deadline';
    } else if (error instanceof RejectedError) {
      kind = 'rejected';
    }
    return { kind, code, message };
  }
  if (error instanceof ClientClosedError) {
    return { kind: 'closed', code: null, message };
  }
  if (error instanceof OpaqueIdError) {
    return { kind: 'opaque', opaque_kind: error.kind, code: null, message };
  }
  if (error instanceof RangeError || error instanceof TypeError) {
    return { kind: 'invalid', code: null, message };
  }
  return { kind: 'other', code: null, message };
}

function write(reply: Json): void {
  process.stdout.write(`${JSON.stringify(reply)}\n`);
}

async function answer(request: Json): Promise<void> {
  const start = performance.now();
  let reply: Json;
  try {
    reply = { ...(await run(request)), ok: true };
  } catch (error) {
    reply = { ok: false, error: errorOf(error) };
  }
  write({ ...reply, id: request.id, elapsed_ms: performance.now() - start });
}

function callOptions(request: Json): { timeoutMs?: number } {
  return request.deadline_ms === undefined ? {} : { timeoutMs: request.deadline_ms };
}

async function run(request: Json): Promise<Json> {
  switch (request.op) {
    case 'client':
      clients.set(request.name, new SnowmintClient(request.endpoints, clientOptions(request)));
      return {};
    case 'decode':
      return decodeOp(request);
    case 'opaque_format':
      return { text: formatOpaqueId(opaqueId(request.key_version, BigInt(request.value))) };
    case 'opaque_parse': {
      const opaque = parseOpaqueId(request.text);
      return { key_version: opaque.keyVersion, value: opaque.value.toString() };
    }
  }
  const client = clients.get(request.client);
  if (!client) {
    throw new Error(`no client ${request.client}`);
  }
  switch (request.op) {
    case 'next_id':
      return { ids: [(await client.nextId(callOptions(request))).toString()] };
    case 'batch':
      return { ids: (await client.batch(request.n, callOptions(request))).map(String) };
    case 'next_value':
      return { value: (await client.nextValue(request.sequence, callOptions(request))).toString() };
    case 'close':
      client.close();
      return {};
    case 'burst': {
      const calls = Array.from({ length: request.n }, () => client.nextId());
      const results = await Promise.allSettled(calls);
      return {
        results: results.map((r) =>
          r.status === 'fulfilled' ? { ok: true, id: r.value.toString() } : { ok: false, error: errorOf(r.reason) },
        ),
      };
    }
    case 'loop':
      return { calls: await loop(client, request) };
  }
  throw new Error(`unknown op ${request.op}`);
}

async function loop(client: SnowmintClient, request: Json): Promise<unknown[]> {
  const calls: unknown[] = [];
  const start = performance.now();
  for (let n = 0; performance.now() - start < request.duration_ms; n++) {
    await sleep(Math.max(0, start + n * request.every_ms - performance.now()));
    const at = Date.now();
    const begun = performance.now();
    try {
      const id = await client.nextId(callOptions(request));
      calls.push([at, performance.now() - begun, id.toString(), null]);
    } catch (error) {
      calls.push([at, performance.now() - begun, null, errorOf(error).kind]);
    }
  }
  return calls;
}

function clientOptions(request: Json): ClientOptions {
  const options: ClientOptions = {};
  if (request.timeout_ms !== undefined) {
    options.timeoutMs = request.timeout_ms;
  }
  if (request.attempts !== undefined) {
    options.attempts = request.attempts;
  }
  if (request.sequence_prefetch !== undefined) {
    options.sequencePrefetch = request.sequence_prefetch;
  }
  if (request.token !== undefined) {
    options.token = request.token;
  }
  if (request.buffer) {
    const { batch, low_water: lowWater, max_refills: maxRefills, max_age_ms: maxAgeMs } = request.buffer;
    options.buffer = {
      ...(batch === undefined ? {} : { batch }),
      ...(lowWater === undefined ? {} : { lowWater }),
      ...(maxRefills === undefined ? {} : { maxRefills }),
      ...(maxAgeMs === undefined ? {} : { maxAgeMs }),
    };
  }
  if (request.tls) {
    const { ca, cert, key } = request.tls as Record<string, string | undefined>;
    options.tls = {
      ...(ca === undefined ? {} : { ca: readFileSync(ca) }),
      ...(cert === undefined ? {} : { cert: readFileSync(cert) }),
      ...(key === undefined ? {} : { key: readFileSync(key) }),
    };
  }
  return options;
}

function decodeOp(request: Json): Json {
  const spec = request.layout;
  const fields = layout({
    name: 'test',
    epochMs: spec.epoch_ms,
    tickMs: spec.tick_ms,
    timeBits: spec.time_bits,
    workerBits: spec.worker_bits,
    sequenceBits: spec.sequence_bits,
    order: spec.order as FieldOrder,
  });
  const d = decode(BigInt(request.value), fields);
  return { unix_ms: d.unixMs.toString(), tick: d.tick.toString(), worker_id: d.workerId, sequence: d.sequence, time: d.time };
}

const pending = new Set<Promise<void>>();
createInterface({ input: process.stdin }).on('line', (line) => {
  if (line.trim() === '') {
    return;
  }
  const task = answer(JSON.parse(line) as Json);
  pending.add(task);
  void task.finally(() => pending.delete(task));
}).on('close', () => {
  void Promise.allSettled([...pending]).then(() => {
    clients.forEach((c) => c.close());
    process.exit(0);
  });
});
