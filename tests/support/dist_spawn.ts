/**
 * Runs tests/support/dist_worker.ts as real processes, one per rank, over the compiled dist/ (build it
 * first: npx tsc -p tsconfig.json). The worker is transpiled once into a temporary .mjs whose
 * imports of src/dist point at dist/dist.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import ts from 'typescript';
import type { WorkerSpec } from './dist_worker.js';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

export interface RankExit {
  readonly rank: number;
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** Writes the runnable worker; returns its path and a function that removes it. */
export function buildWorker(): { path: string; remove: () => void } {
  const source = readFileSync(join(ROOT, 'tests/support/dist_worker.ts'), 'utf8');
  const js = ts.transpileModule(source, { compilerOptions: { module: ts.ModuleKind.ES2022, target: ts.ScriptTarget.ES2022 } }).outputText;
  const linked = js.replaceAll("'../../src/dist/", `'${pathToFileURL(join(ROOT, 'dist/dist')).href}/`);
  const dir = mkdtempSync(join(tmpdir(), 'mdlm-dist-'));
  const path = join(dir, 'dist_worker.mjs');
  writeFileSync(path, linked);
  return { path, remove: () => rmSync(dir, { recursive: true, force: true }) };
}

/** Starts one rank; `onLine` sees each stdout line as it comes. */
function startRank(worker: string, spec: WorkerSpec, onLine: (line: string) => void): Promise<RankExit> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [worker], { env: { ...process.env, DIST_WORKER: JSON.stringify(spec) }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    let partial = '';
    const killer = setTimeout(() => child.kill('SIGKILL'), 60_000);
    child.stdout.setEncoding('utf8').on('data', (c: string) => {
      stdout += c;
      partial += c;
      const lines = partial.split('\n');
      partial = lines.pop()!;
      lines.forEach(onLine);
    });
    child.stderr.setEncoding('utf8').on('data', (c: string) => (stderr += c));
    child.on('close', (code) => {
      clearTimeout(killer);
      resolve({ rank: spec.rank, code, stdout, stderr });
    });
  });
}

/**
 * Runs ranks `ranks` of a job (rank 0 first, the others once it listens, on the port it took) and
 * returns each one's exit, in the order of `ranks`.
 */
export async function runRanks(worker: string, base: Omit<WorkerSpec, 'rank' | 'port'>, ranks: readonly number[]): Promise<RankExit[]> {
  let announce: (port: number) => void = () => {};
  const port = new Promise<number>((resolve) => (announce = resolve));
  const exits: Promise<RankExit>[] = [];
  exits.push(
    startRank(worker, { ...base, rank: 0, port: 0 }, (line) => {
      const m = /^port (\d+)$/.exec(line);
      if (m) announce(Number(m[1]));
    }),
  );
  const first = await Promise.race([port, exits[0]!.then(() => -1)]);
  if (first >= 0) for (const r of ranks.filter((r) => r !== 0)) exits.push(startRank(worker, { ...base, rank: r, port: first }, () => {}));
  return Promise.all(exits);
}

/** A process of the CLI as it ended: its exit code or signal, its stderr, and when it ended. */
export interface CliExit {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly stderr: string;
  readonly endedAt: number;
}

export interface CliProcess {
  readonly pid: number;
  /** The stderr written so far. */
  stderr(): string;
  kill(signal: NodeJS.Signals): void;
  readonly exit: Promise<CliExit>;
}

/**
 * Starts `bin/mdlm.js ...args` with `env` added to this process's environment (torchrun's
 * variables make it a rank); `onStderr` sees its stderr so far after each piece. It is killed after
 * `limitMs`.
 */
export function startCli(args: readonly string[], env: Readonly<Record<string, string>> = {}, onStderr: (all: string, p: CliProcess) => void = () => {}, limitMs = 90_000): CliProcess {
  const child = spawn(process.execPath, [join(ROOT, 'bin/mdlm.js'), ...args], { cwd: ROOT, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  const killer = setTimeout(() => child.kill('SIGKILL'), limitMs);
  const p: CliProcess = {
    pid: child.pid!,
    stderr: () => stderr,
    kill: (signal) => void child.kill(signal),
    exit: new Promise((resolve) => {
      child.on('close', (code, signal) => {
        clearTimeout(killer);
        resolve({ code, signal, stderr, endedAt: Date.now() });
      });
    }),
  };
  child.stdout.resume();
  child.stderr.setEncoding('utf8').on('data', (c: string) => {
    stderr += c;
    onStderr(stderr, p);
  });
  return p;
}

/** torchrun's variables for rank `rank` of `worldSize` ranks on this host, the store on `port`. */
export function rankEnv(rank: number, worldSize: number, port: number): Record<string, string> {
  return { RANK: String(rank), WORLD_SIZE: String(worldSize), LOCAL_RANK: String(rank), LOCAL_WORLD_SIZE: String(worldSize), MASTER_ADDR: '127.0.0.1', MASTER_PORT: String(port) };
}
