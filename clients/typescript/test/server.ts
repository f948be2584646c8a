/**
 * The real snowmint binary, run standalone on free loopback ports with its state in a temp
 * dir, for the tests. `close()` kills it (SIGKILL) and removes the dir; the tests call it in
 * `after` hooks, so it runs whether a test passed or not.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { accessSync, constants, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

const START_LIMIT_MS = 30_000;

/** `SNOWMINT_BIN`, or this repository's debug build. */
export function binary(): string {
  const bin = process.env.SNOWMINT_BIN || fileURLToPath(new URL('../../../../target/debug/snowmint', import.meta.url));
  try {
    accessSync(bin, constants.X_OK);
  } catch {
    throw new Error(`no snowmint binary at ${resolve(bin)}: build it with \`cargo build --locked --bin snowmint\` or set SNOWMINT_BIN`);
  }
  return bin;
}

export class SnowmintServer {
  private constructor(
    private readonly child: ChildProcess,
    private readonly stateDir: string,
    readonly grpcAddr: string,
    readonly adminAddr: string,
  ) {}

  /** The gRPC endpoint URL. */
  get url(): string {
    return `http://${this.grpcAddr}`;
  }

  /** A server minting as worker `workerId`, with `extra` flags of `snowmint serve`. */
  static start(workerId: number, ...extra: string[]): Promise<SnowmintServer> {
    return SnowmintServer.startIn(workerId, mkdtempSync(join(tmpdir(), 'snowmint-ts-test-')), extra);
  }

  /**
   * A server on a state dir where `snowmint sequence create` made each of `sequences` (name to
   * its flags after the name, such as `['--ordered']`), with `extra` flags of `snowmint serve`.
   */
  static startWithSequences(workerId: number, sequences: Record<string, string[]>, ...extra: string[]): Promise<SnowmintServer> {
    const dir = mkdtempSync(join(tmpdir(), 'snowmint-ts-test-'));
    for (const [name, flags] of Object.entries(sequences)) {
      execFileSync(binary(), ['sequence', 'create', name, '--state-dir', dir, ...flags], { stdio: 'pipe' });
    }
    return SnowmintServer.startIn(workerId, dir, extra);
  }

  /**
   * A server that refuses to mint: its state file says a previous run reserved the hour
   * ahead, so it must wait for the clock to pass that, and answers `UNAVAILABLE` meanwhile.
   * `extra` flags of `snowmint serve` follow.
   */
  static startRefusing(workerId: number, ...extra: string[]): Promise<SnowmintServer> {
    const dir = mkdtempSync(join(tmpdir(), 'snowmint-ts-test-'));
    const now = Date.now();
    const reserved = now + 3_600_000;
    const state = {
      version: 1,
      worker_id: workerId,
      layout: {
        name: 'snowmint',
        epoch_ms: 1767225600000,
        tick_ms: 1,
        time_bits: 41,
        worker_bits: 10,
        sequence_bits: 12,
        order: 'worker_sequence',
      },
      reserved_until_ms: reserved,
      reserved_until: new Date(reserved).toISOString(),
      saved_at: new Date(now).toISOString(),
    };
    writeFileSync(join(dir, `worker-${workerId}.json`), JSON.stringify(state));
    return SnowmintServer.startIn(workerId, dir, extra);
  }

  private static startIn(workerId: number, stateDir: string, extra: string[] = []): Promise<SnowmintServer> {
    const args = ['serve', '--listen', '127.0.0.1:0', '--admin-listen', '127.0.0.1:0', '--log-format', 'json',
      '--state-dir', stateDir, '--worker-id', String(workerId), ...extra];
    let child: ChildProcess;
    try {
      child = spawn(binary(), args, { stdio: ['ignore', 'ignore', 'pipe'] });
    } catch (error) {
      rmSync(stateDir, { recursive: true, force: true });
      throw error;
    }
    return new Promise((resolvePromise, reject) => {
      const seen: string[] = [];
      let started = false;
      const fail = (why: string) => {
        clearTimeout(timer);
        child.kill('SIGKILL');
        rmSync(stateDir, { recursive: true, force: true });
        reject(new Error(`snowmint did not start: ${why}; output:\n${seen.join('\n')}`));
      };
      const timer = setTimeout(() => fail(`no listening line within ${START_LIMIT_MS} ms`), START_LIMIT_MS);
      child.once('error', (error) => fail(error.message));
      child.once('exit', (code, signal) => {
        if (!started) {
          fail(`exited with ${code ?? signal}`);
        }
      });
      // Reads stderr for the whole life of the process, so the pipe never fills.
      createInterface({ input: child.stderr! }).on('line', (line) => {
        if (started) {
          return;
        }
        const json = parseObject(line);
        if (typeof json?.grpc_addr === 'string' && typeof json?.admin_addr === 'string') {
          started = true;
          clearTimeout(timer);
          resolvePromise(new SnowmintServer(child, stateDir, json.grpc_addr, json.admin_addr));
        } else {
          seen.push(line);
        }
      });
    });
  }

  /** Kills the process with SIGKILL, as a crash would, and waits until it is gone. */
  kill(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) {
      return Promise.resolve();
    }
    return new Promise((resolvePromise, reject) => {
      const timer = setTimeout(() => reject(new Error('snowmint did not die within 10 s of SIGKILL')), 10_000);
      this.child.once('exit', () => {
        clearTimeout(timer);
        resolvePromise();
      });
      this.child.kill('SIGKILL');
    });
  }

  /**
   * Pauses the process (SIGSTOP), and waits until every thread has stopped: it keeps its
   * connections but answers nothing.
   */
  async pause(): Promise<void> {
    this.child.kill('SIGSTOP');
    const threads = `/proc/${this.child.pid}/task`;
    const stopped = () =>
      readdirSync(threads).every((t) => /^\d+ \(.*\) T /.test(readFileSync(`${threads}/${t}/stat`, 'utf8')));
    const limit = performance.now() + 10_000;
    while (!stopped()) {
      if (performance.now() > limit) {
        throw new Error(`snowmint ${this.child.pid} did not stop within 10 s of SIGSTOP`);
      }
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
  }

  /** Resumes a paused process (SIGCONT). */
  resume(): void {
    this.child.kill('SIGCONT');
  }

  /** The value of one series of the server's metrics, e.g. `x{a="b"}`. */
  async metric(series: string): Promise<number> {
    const response = await fetch(`http://${this.adminAddr}/metrics`, { signal: AbortSignal.timeout(5000) });
    const body = await response.text();
    const line = body.split('\n').find((l) => l.startsWith(`${series} `));
    if (line === undefined) {
      throw new Error(`no series ${series} in\n${body}`);
    }
    return Number(line.slice(series.length + 1));
  }

  async close(): Promise<void> {
    await this.kill();
    rmSync(this.stateDir, { recursive: true, force: true });
  }
}

function parseObject(line: string): Record<string, unknown> | undefined {
  try {
    const json: unknown = JSON.parse(line);
    return typeof json === 'object' && json !== null ? (json as Record<string, unknown>) : undefined;
  } catch {
    return undefined; // not a JSON line
  }
}
