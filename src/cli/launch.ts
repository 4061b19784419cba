/**
 * `mdlm train --nproc-per-node N`: N worker processes on this host, ranks 0..N−1 of one job. Each
 * is this same CLI with the launcher's arguments (less --nproc-per-node), in torchrun's environment
 * convention (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR 127.0.0.1, MASTER_PORT a
 * free port), so a worker joins its job as one started by torchrun does (src/dist/env.ts).
 *
 * - A worker that fails (a non-zero exit or a signal the launcher did not forward) takes the others
 *   down: they are asked to stop (SIGTERM), killed if still there after `graceMs`, and the launcher
 *   exits 1 naming the rank that failed first.
 * - SIGINT and SIGTERM to the launcher go to every worker, once per signal received: the workers
 *   stop together after a step and save a checkpoint (a second signal quits them at once, as it
 *   quits one process), and the launcher exits as they do (130, 143). Each worker is the leader of a process group of its own, so a Ctrl-C in the
 *   terminal reaches the workers through the launcher only, exactly once.
 * - A worker whose launcher is gone (its IPC channel closed: the launcher was killed) exits
 *   (`exitWithLauncher`).
 */
import { type ChildProcess, fork } from 'node:child_process';
import { createServer } from 'node:net';

export interface LaunchOptions {
  /** Workers to start. */
  readonly nproc: number;
  /** The module each worker runs (the CLI's entry, bin/mdlm.js) and its arguments. */
  readonly script: string;
  readonly args: readonly string[];
  /** The workers' environment before the job's variables are added (default: this process's). */
  readonly env?: NodeJS.ProcessEnv;
  readonly log: (line: string) => void;
  /** How long workers asked to stop after a failure have before they are killed. */
  readonly graceMs?: number;
}

/** A TCP port free on this host now (the store of rank 0 binds it moments later). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

const SIGNAL_EXIT: Readonly<Record<string, number>> = { SIGINT: 130, SIGTERM: 143 };

/** Runs the workers to their end; resolves with the launcher's exit code. */
export async function launchWorkers(o: LaunchOptions): Promise<number> {
  const port = await freePort();
  const grace = o.graceMs ?? 10_000;
  const children: ChildProcess[] = [];
  const running = new Set<number>();
  /** The signals forwarded to the workers, in order. */
  const forwarded: NodeJS.Signals[] = [];
  let failure: string | undefined;
  /** The exit code of the first worker a signal stopped (130, 143): it stopped cleanly, with the others. */
  let stopped: number | undefined;
  let killer: NodeJS.Timeout | undefined;

  const tearDown = (): void => {
    for (const r of running) children[r]!.kill('SIGTERM');
    killer ??= setTimeout(() => {
      for (const r of running) children[r]!.kill('SIGKILL');
    }, grace);
  };
  const onSignal = (name: NodeJS.Signals): void => {
    forwarded.push(name);
    o.log(`${name}: passing it on to ${running.size} worker${running.size === 1 ? '' : 's'}`);
    for (const r of running) children[r]!.kill(name);
  };
  const signals: NodeJS.Signals[] = ['SIGINT', 'SIGTERM'];
  for (const s of signals) process.on(s, onSignal);

  try {
    const exits = Array.from({ length: o.nproc }, (_, rank) => new Promise<void>((resolve) => {
      const child = fork(o.script, [...o.args], {
        env: {
          ...(o.env ?? process.env), RANK: String(rank), WORLD_SIZE: String(o.nproc), LOCAL_RANK: String(rank), LOCAL_WORLD_SIZE: String(o.nproc),
          MASTER_ADDR: '127.0.0.1', MASTER_PORT: String(port),
        },
        stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
        detached: true,
      });
      children.push(child);
      running.add(rank);
      child.on('error', (e) => {
        failure ??= `rank ${rank} could not start: ${e.message}`;
        tearDown();
      });
      child.on('exit', (code, signal) => {
        running.delete(rank);
        // Exit 130 or 143 is a worker that stopped cleanly on a signal (its own or one passed on),
        // as the others do at the same step; a signal passed on may also have ended it.
        const clean = signal === null ? code === 0 || Object.values(SIGNAL_EXIT).includes(code!) : forwarded.includes(signal);
        if (signal === null && code !== 0 && clean) stopped ??= code!;
        if (!clean && failure === undefined) {
          failure = `rank ${rank} failed (${signal === null ? `exit code ${code}` : `killed by ${signal}`})`;
          if (running.size > 0) o.log(`mdlm: ${failure}; stopping the other ranks`);
          tearDown();
        }
        resolve();
      });
    }));
    await Promise.all(exits);
  } finally {
    for (const s of signals) process.off(s, onSignal);
    if (killer) clearTimeout(killer);
  }
  if (failure !== undefined) {
    o.log(`mdlm: the job of ${o.nproc} workers stopped: ${failure}`);
    return 1;
  }
  return stopped ?? (forwarded.length > 0 ? SIGNAL_EXIT[forwarded[0]!]! : 0);
}

/** In a worker the launcher forked: exit at once when the launcher is gone (its IPC channel closed). */
export function exitWithLauncher(rank: number): void {
  if (!process.send) return;
  process.on('disconnect', () => {
    process.stderr.write(`mdlm: rank ${rank}: the launcher is gone; exiting\n`, () => process.exit(1));
  });
}
