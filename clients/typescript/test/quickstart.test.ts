// The TypeScript quick start of clients/README.md, and the UUID example of the package's own
// README.md, run against a real server, and checked to be the READMEs' text, so the READMEs
// cannot drift from code that compiles and works.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, test } from 'node:test';

import { SnowmintClient, decode, decodeUuid, formatUuid, parseUuid, type Uuid } from '../src/index.js';
import { SnowmintServer } from './server.js';

const README = new URL('../../../README.md', import.meta.url);
const PACKAGE_README = new URL('../../README.md', import.meta.url);
const THIS_FILE = new URL('../../test/quickstart.test.ts', import.meta.url);

async function quickStart(endpoints: string[]): Promise<void> {
  // quick-start:begin
  const client = new SnowmintClient(endpoints, {
    timeoutMs: 500, // per attempt on a server; 1000 by default
    buffer: true, // optional: prefetch IDs in the background
  });
  try {
    const id: bigint = await client.nextId(); // unique across every server
    const ids: bigint[] = await client.batch(100); // strictly increasing, from one server
    const { time, workerId } = decode(id);
    console.log(`${id} minted at ${time} by worker ${workerId}; ${ids.length} more`);
  } finally {
    client.close();
  }
  // quick-start:end
}

test('the README quick start runs', { timeout: 60_000 }, async () => {
  const server = await SnowmintServer.start(9);
  after(() => server.close());
  await quickStart([server.url]);
});

async function uuids(endpoints: string[]): Promise<void> {
  // uuid-example:begin
  const client = new SnowmintClient(endpoints);
  try {
    // One NextUuid call, then one BatchUuids call: 100 UUIDs, strictly increasing.
    const uuid: Uuid = await client.nextUuid();
    const uuids: Uuid[] = await client.batchUuids(100);
    // Read back locally, with the default layout (that of the server that minted it).
    const { id, unixMs, slot, sequence, random } = decodeUuid(uuid);
    console.log(`${uuid} is ID ${id}: ${unixMs} ms, slot ${slot}, sequence ${sequence}, random ${random}`);
    console.log(uuids.every((u, i) => i === 0 || uuids[i - 1]!.compare(u) < 0)); // true
    console.log(parseUuid(formatUuid(uuid)).equals(uuid)); // true
  } finally {
    client.close();
  }
  // uuid-example:end
}

test('the package README’s UUID example runs', { timeout: 60_000 }, async () => {
  const server = await SnowmintServer.start(12);
  after(() => server.close());
  await uuids([server.url]);
});

/** The code of this file between `// <marker>:begin` and `// <marker>:end`, dedented. */
function snippet(marker: string): string {
  const marked = new RegExp(`// ${marker}:begin\\n(.*?)\\n[ ]*// ${marker}:end`, 's').exec(readFileSync(THIS_FILE, 'utf8'));
  assert.ok(marked, `no ${marker} markers in test/quickstart.test.ts`);
  return dedent(marked[1]!);
}

/** Whether a ```ts block of the file at `url` holds `code`. */
function shows(url: URL, code: string): boolean {
  const blocks = [...readFileSync(url, 'utf8').matchAll(/```ts\n(.*?)```/gs)].map((m) => m[1]!);
  return blocks.some((block) => block.includes(code));
}

test('the README shows this quick start', () => {
  const code = snippet('quick-start');
  assert.ok(
    shows(README, code),
    `clients/README.md has no \`\`\`ts block containing the quick start of test/quickstart.test.ts; copy it there:\n${code}`,
  );
});

test('the package README shows this UUID example', () => {
  const code = snippet('uuid-example');
  assert.ok(
    shows(PACKAGE_README, code),
    `clients/typescript/README.md has no \`\`\`ts block containing the UUID example of test/quickstart.test.ts; copy it there:\n${code}`,
  );
});

function dedent(text: string): string {
  const lines = text.split('\n');
  const indent = Math.min(...lines.filter((l) => l.trim() !== '').map((l) => l.length - l.trimStart().length));
  return lines.map((l) => (l.trim() === '' ? '' : l.slice(indent))).join('\n');
}
