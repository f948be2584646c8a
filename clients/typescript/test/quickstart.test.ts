// The TypeScript quick start of clients/README.md, run against a real server, and checked to
// be the README's text, so the README cannot drift from code that compiles and works.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, test } from 'node:test';

import { SnowmintClient, decode } from '../src/index.js';
import { SnowmintServer } from './server.js';

const README = new URL('../../../README.md', import.meta.url);
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

test('the README shows this quick start', () => {
  const marked = /\/\/ quick-start:begin\n(.*?)\n[ ]*\/\/ quick-start:end/s.exec(readFileSync(THIS_FILE, 'utf8'));
  assert.ok(marked, 'no quick-start markers in test/quickstart.test.ts');
  const snippet = dedent(marked[1]!);
  const blocks = [...readFileSync(README, 'utf8').matchAll(/```ts\n(.*?)```/gs)].map((m) => m[1]!);
  assert.ok(
    blocks.some((block) => block.includes(snippet)),
    `clients/README.md has no \`\`\`ts block containing the quick start of test/quickstart.test.ts; copy it there:\n${snippet}`,
  );
});

function dedent(text: string): string {
  const lines = text.split('\n');
  const indent = Math.min(...lines.filter((l) => l.trim() !== '').map((l) => l.length - l.trimStart().length));
  return lines.map((l) => (l.trim() === '' ? '' : l.slice(indent))).join('\n');
}
