/**
 * IDs per second to one caller looping on a buffered `nextId()`, with the buffer settings of
 * `snowmint bench --method buffered` (batch 4096, low water 16384, 4 refills), so the two
 * compare. Not a test:
 *
 *   clients/typescript/bench.sh --addr http://127.0.0.1:50051 --duration 5
 */
import { parseArgs } from 'node:util';

import { SnowmintClient } from '../src/index.js';

const { values } = parseArgs({
  options: {
    addr: { type: 'string', default: 'http://127.0.0.1:50051' },
    duration: { type: 'string', default: '5' },
  },
});
const seconds = Number(values.duration);
const client = new SnowmintClient(values.addr, { buffer: { batch: 4096, lowWater: 4 * 4096, maxRefills: 4 } });
try {
  // Warm up: the JIT and the first refills, before the clock starts.
  const warmUntil = performance.now() + 1000;
  while (performance.now() < warmUntil) {
    await client.nextId();
  }
  // IDs go into a preallocated typed array, so no growing array stalls the loop.
  let ids = new BigUint64Array(1 << 24);
  let count = 0;
  const start = performance.now();
  const until = start + seconds * 1000;
  while ((count & 1023) !== 0 || performance.now() < until) {
    if (count === ids.length) {
      const grown = new BigUint64Array(ids.length * 2);
      grown.set(ids);
      ids = grown;
    }
    ids[count++] = await client.nextId();
  }
  const elapsed = (performance.now() - start) / 1000;
  const sorted = ids.subarray(0, count).sort();
  let duplicates = 0;
  for (let i = 1; i < count; i++) {
    if (sorted[i] === sorted[i - 1]) {
      duplicates++;
    }
  }
  const rate = Math.round(count / elapsed);
  console.log(
    `typescript buffered nextId, 1 caller: ${count} IDs in ${elapsed.toFixed(2)} s = ${rate} IDs/s, ` +
      (duplicates === 0 ? 'all unique' : `${duplicates} DUPLICATES`),
  );
  process.exitCode = duplicates === 0 ? 0 : 1;
} catch (error) {
  console.error(`bench: ${error instanceof Error ? error.message : String(error)}`);
  process.exitCode = 1;
} finally {
  client.close();
}
