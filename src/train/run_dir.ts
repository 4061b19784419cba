/**
 * A run directory (`--out`) as a training run takes it over:
 *
 * - it must be a directory files can be written in (checked up front, bounded: src/runtime/files.ts);
 * - one run at a time: `<out>/.lock` holds the owner's pid and host, and a second run into the same
 *   directory is refused while that process lives (a lock left by a process that is gone is taken);
 * - the owner removes what interrupted saves and removals left (`.tmp-*`, `.deleting-*`);
 * - a new run refuses a directory that holds an old run's checkpoints or metrics, unless told to
 *   overwrite it (then those are deleted first: metrics.jsonl, `latest`, each step directory
 *   renamed away and removed; nothing else in the directory is touched);
 * - `resume: true` needs a complete checkpoint (latestCheckpoint: the one `latest` names) and
 *   says what it found otherwise; `resume: 'auto'` continues when there is one and starts a new
 *   run when there is none;
 * - a resumed run's metrics.jsonl loses the rows past the checkpoint's step (the steps it trains
 *   again), so that every step appears once.
 */
import { closeSync, existsSync, openSync, readdirSync, readFileSync, renameSync, rmSync, unlinkSync, writeFileSync, writeSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { LATEST_FILE, describeCheckpoints, latestCheckpoint, latestPointer, listCheckpoints, removeDir } from '../checkpoint/checkpoint.js';
import { fail } from '../errors.js';
import { asFileError, checkWritableDir, isSystemError, withFileErrors } from '../runtime/files.js';

export const METRICS_FILE = 'metrics.jsonl';
const LOCK_FILE = '.lock';

export type ResumeMode = boolean | 'auto';

export interface RunDirOptions {
  /** true: continue from the newest checkpoint, which must exist; 'auto': continue if there is one; false: a new run. */
  readonly resume: ResumeMode;
  /** A new run may replace an old run's checkpoints and metrics. */
  readonly overwrite: boolean;
  readonly log: (line: string) => void;
}

/** A run directory taken over by this process. */
export interface RunDir {
  readonly path: string;
  /** The checkpoint to continue from; null for a new run. */
  readonly resumeFrom: { readonly dir: string; readonly step: number } | null;
  /** Give the directory up (remove the lock). */
  release(): void;
}

/** Take over `out` for a training run: see the module comment. Fails (one line) before changing anything it should not. */
export function openRunDir(out: string, opts: RunDirOptions): RunDir {
  if (opts.overwrite && opts.resume !== false) fail('BAD_ARGUMENT', `--overwrite starts a new run and --resume continues one: pass one of them`);
  checkWritableDir(out, '--out');
  const release = lock(out);
  try {
    removeLeftovers(out, opts.log);
    const resumeFrom = decide(out, opts);
    if (resumeFrom) keepMetricsUpTo(out, resumeFrom.step, opts.log);
    return { path: out, resumeFrom, release };
  } catch (e) {
    release();
    throw e;
  }
}

/** The checkpoint to continue from, or null after making sure a new run may start (clearing the old one under overwrite). */
function decide(out: string, opts: RunDirOptions): { dir: string; step: number } | null {
  const latest = latestCheckpoint(out);
  if (opts.resume !== false && latest) {
    if (latest.passedOver) opts.log(`${out}: ${latest.passedOver}; resuming from ${latest.dir} instead`);
    return latest;
  }
  const checkpoints = listCheckpoints(out);
  if (opts.resume === true) {
    fail(
      checkpoints.length ? 'BAD_FILE' : 'NOT_FOUND',
      `--resume: ${out} holds no complete checkpoint to continue from (${checkpoints.length ? `found ${describeCheckpoints(checkpoints)}` : 'no step-* directories'}); run without --resume to start a new run${checkpoints.length || existsSync(join(out, METRICS_FILE)) ? ' (with --overwrite to replace what is there)' : ''}, or pass --resume auto to start a new run when there is nothing to resume`,
    );
  }
  if (opts.resume === 'auto') opts.log(`--resume auto: ${out} holds no complete checkpoint; starting a new run`);
  const old = [
    ...checkpoints.map((c) => c.name),
    ...(existsSync(join(out, METRICS_FILE)) ? [METRICS_FILE] : []),
    ...(existsSync(join(out, LATEST_FILE)) ? [LATEST_FILE] : []),
  ];
  if (old.length === 0) return null;
  if (!opts.overwrite) {
    const pointer = latestPointer(out);
    fail(
      'BAD_ARGUMENT',
      `${out} holds an earlier run (${old.join(', ')}${pointer ? `; latest is ${pointer}` : ''}); pass --resume to continue it, --overwrite to delete its checkpoints and metrics and start anew, or another --out`,
    );
  }
  withFileErrors({ path: out, action: 'clear the earlier run (--overwrite) in', flag: '--out' }, () => {
    // The metrics and the pointer first: a removal cut short leaves complete checkpoints only, which a new run again refuses.
    rmSync(join(out, METRICS_FILE), { force: true });
    rmSync(join(out, LATEST_FILE), { force: true });
    for (const c of checkpoints) removeDir(c.dir, out, c.name);
  });
  opts.log(`--overwrite: removed ${old.join(', ')} from ${out}`);
  return null;
}

/** Remove `.tmp-*` and `.deleting-*` entries: saves and removals a killed run did not finish. */
function removeLeftovers(out: string, log: (line: string) => void): void {
  const stale = readdirSync(out).filter((f) => f.startsWith('.tmp-') || f.startsWith('.deleting-'));
  if (stale.length === 0) return;
  for (const f of stale) {
    withFileErrors({ path: join(out, f), action: 'remove the leftover', flag: '--out' }, () => rmSync(join(out, f), { recursive: true, force: true }));
  }
  log(`${out}: removed what an interrupted save or removal left: ${stale.join(', ')}`);
}

/**
 * Drop metrics.jsonl rows past `step` (and a torn last line), replacing the file atomically: the
 * resumed run writes those steps again.
 */
export function keepMetricsUpTo(out: string, step: number, log: (line: string) => void): void {
  const path = join(out, METRICS_FILE);
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    if (isSystemError(e) && e.code === 'ENOENT') return;
    throw asFileError(e, { path, action: 'read' });
  }
  const lines = text.split('\n').filter((l) => l.trim() !== '');
  const kept = lines.filter((l) => {
    try {
      const row = JSON.parse(l) as { step?: unknown };
      return typeof row.step === 'number' && row.step <= step;
    } catch {
      return false;
    }
  });
  if (kept.length === lines.length) return;
  const tmp = join(out, `.tmp-${METRICS_FILE}-${process.pid}`);
  withFileErrors({ path, action: 'rewrite', flag: '--out' }, () => {
    writeFileSync(tmp, kept.map((l) => `${l}\n`).join(''));
    renameSync(tmp, path);
  });
  log(`${path}: dropped ${lines.length - kept.length} rows past step ${step}, which this run trains again`);
}

interface LockOwner {
  pid: number;
  host: string;
}

/** Whether process `pid` of this host is alive. */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return isSystemError(e) && e.code === 'EPERM';
  }
}

/** Create `<out>/.lock` for this process, taking over one whose process is gone; returns its release. */
function lock(out: string): () => void {
  const path = join(out, LOCK_FILE);
  const me: LockOwner = { pid: process.pid, host: hostname() };
  const at = { path, action: 'create the lock file', flag: '--out' };
  for (let attempt = 0; attempt < 2; attempt++) {
    let fd: number;
    try {
      fd = openSync(path, 'wx');
    } catch (e) {
      if (!isSystemError(e) || e.code !== 'EEXIST') throw asFileError(e, at);
      let owner: Partial<LockOwner> = {};
      try {
        owner = JSON.parse(readFileSync(path, 'utf8')) as Partial<LockOwner>;
      } catch {
        /* torn or foreign: treated as stale */
      }
      if (typeof owner.pid === 'number' && owner.pid !== process.pid && (owner.host !== me.host || alive(owner.pid))) {
        fail('BAD_ARGUMENT', `${out} is in use by another mdlm run (pid ${owner.pid} on ${owner.host ?? 'an unknown host'}); wait for it to end or pass another --out (if no run uses it, delete ${path})`);
      }
      withFileErrors(at, () => unlinkSync(path));
      continue;
    }
    withFileErrors(at, () => {
      try {
        writeSync(fd, `${JSON.stringify(me)}\n`);
      } finally {
        closeSync(fd);
      }
    });
    return () => {
      try {
        const owner = JSON.parse(readFileSync(path, 'utf8')) as Partial<LockOwner>;
        if (owner.pid === me.pid && owner.host === me.host) unlinkSync(path);
      } catch {
        /* already gone, or the directory no longer takes a removal: the next run takes a dead owner's lock */
      }
    };
  }
  return fail('IO_ERROR', `cannot take ${path}: another process keeps creating it; pass another --out`);
}
