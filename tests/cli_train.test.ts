/**
 * `mdlm train` and `mdlm data prepare` as a user runs them (bin/mdlm.js over dist/) against
 * run directories and paths that cannot take a run: every refusal and every filesystem error is
 * one line naming the path and the fix, with a non-zero exit and no stack; a save that fails
 * mid-run (the directory made read-only) stops the run with the checkpoint before it intact.
 * Permission bits bind every user but root: as root these runs are made as `nobody`.
 */
import { spawn, spawnSync } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { latestCheckpoint, loadCheckpoint, stepDirName } from '../src/checkpoint/checkpoint.js';
import { tinyRunRoot } from './support/train.js';

const NOBODY = 65534;
const asRoot = process.getuid?.() === 0;
/** Spawn options under which permission bits apply. */
const asUser = asRoot ? { uid: NOBODY, gid: NOBODY } : {};

let root: string;
let dataDir: string;
let remove = (): void => {};

beforeAll(async () => {
  ({ root, dataDir, remove } = await tinyRunRoot('mdlm-cli-train-'));
  chmodSync(root, 0o755); // readable by the user the runs are made as
});
afterAll(() => remove());

/** A directory the runs' user owns. */
function ownDir(name: string): string {
  const dir = join(root, name);
  mkdirSync(dir, { recursive: true });
  if (asRoot) chownSync(dir, NOBODY, NOBODY);
  return dir;
}

interface Result {
  code: number | null;
  stderr: string;
}

function mdlm(...args: string[]): Result {
  const r = spawnSync(process.execPath, ['bin/mdlm.js', ...args], { encoding: 'utf8', timeout: 120_000, ...asUser });
  return { code: r.status, stderr: r.stderr };
}

/** A nano run on the prepared data. */
function train(out: string, ...more: string[]): Result {
  return mdlm('train', '--preset', 'nano', '--backend', 'cpu', '--data.path', dataDir, '--out', out, '--steps', '2', '--train.evalBatches', '1', ...more);
}

/** The run failed with exactly this one line. */
function expectOneLine(r: Result, line: string | RegExp): void {
  expect(r.code, r.stderr).toBe(1);
  const lines = r.stderr.trim().split('\n');
  expect(lines.at(-1)).toMatch(typeof line === 'string' ? new RegExp(`^${line.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}$`) : line);
  expect(r.stderr).not.toContain('    at ');
}

describe('mdlm train: where it may write', () => {
  it('an --out that is a file, runs through one, or lies on /proc is one line, at once', () => {
    const file = join(root, 'a-file');
    writeFileSync(file, 'x');
    expectOneLine(train(file), `mdlm: IO_ERROR: cannot create the directory ${file}: ${file} is a file, not a directory; pass another --out, or move that file away`);
    expectOneLine(train(join(file, 'run')), `mdlm: IO_ERROR: cannot create the directory ${join(file, 'run')}: ${file} is a file, not a directory (ENOTDIR); pass another --out`);
    // Node's recursive mkdir never returns here.
    const started = performance.now();
    expectOneLine(train('/proc/mdlm-run'), 'mdlm: IO_ERROR: cannot create the directory /proc/mdlm-run: /proc does not take new entries (not a regular file system) (ENOENT); pass another --out on a regular file system');
    expect(performance.now() - started).toBeLessThan(60_000);
  });

  it('an --out the user cannot write, and a data prepare --out there, are one line each', () => {
    const locked = ownDir('locked');
    chmodSync(locked, 0o555);
    expectOneLine(train(locked), `mdlm: IO_ERROR: cannot write in the directory ${locked}: permission denied (EACCES); pass another --out, or give your user write access to it`);
    expectOneLine(train(join(locked, 'run')), `mdlm: IO_ERROR: cannot create the directory ${join(locked, 'run')}: permission denied (EACCES); pass another --out, or give your user write access to it`);
    expectOneLine(mdlm('data', 'prepare', '--tokenizer', 'byte', '--out', join(locked, 'data')), new RegExp(`^mdlm: IO_ERROR: cannot create the directory ${join(locked, 'data')}: permission denied \\(EACCES\\); .*give your user write access to it$`));
  });
});

describe('mdlm train: run directories', () => {
  it('refuses an --out holding a run without --resume or --overwrite; --overwrite replaces it; --resume needs a checkpoint', () => {
    const out = join(ownDir('runs'), 'one');
    expect(train(out).code).toBe(0);
    expectOneLine(train(out), `mdlm: BAD_ARGUMENT: ${out} holds an earlier run (step-0000002, metrics.jsonl, latest; latest is step-0000002); pass --resume to continue it, --overwrite to delete its checkpoints and metrics and start anew, or another --out`);
    const over = train(out, '--overwrite', '--steps', '1');
    expect(over.code, over.stderr).toBe(0);
    expect(over.stderr).toContain(`--overwrite: removed step-0000002, metrics.jsonl, latest from ${out}`);
    expect(readdirSync(out).filter((f) => f.startsWith('step-'))).toEqual([stepDirName(1)]);

    const empty = join(ownDir('runs'), 'empty');
    expectOneLine(train(empty, '--resume'), `mdlm: NOT_FOUND: --resume: ${empty} holds no complete checkpoint to continue from (no step-* directories); run without --resume to start a new run, or pass --resume auto to start a new run when there is nothing to resume`);
    const auto = train(empty, '--resume', 'auto', '--steps', '1');
    expect(auto.code, auto.stderr).toBe(0);
    expect(auto.stderr).toContain(`--resume auto: ${empty} holds no complete checkpoint; starting a new run`);
  });

  it('a save that fails mid-run (the directory made read-only) is retried once, then stops the run with the checkpoint before it intact', async () => {
    const out = join(ownDir('runs'), 'read-only-later');
    const child = spawn(process.execPath, ['bin/mdlm.js', 'train', '--preset', 'nano', '--backend', 'cpu', '--data.path', dataDir, '--out', out, '--steps', '100000',
      '--train.saveEvery', '1', '--train.logEvery', '1', '--train.evalEvery', '0'], { stdio: ['ignore', 'ignore', 'pipe'], ...asUser });
    let stderr = '';
    let locked = false;
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
      stderr += chunk;
      if (!locked && stderr.includes(`saved ${join(out, stepDirName(1))}`)) {
        locked = true;
        chmodSync(out, 0o555);
      }
    });
    const code = await new Promise<number | null>((resolve) => child.on('exit', (c) => resolve(c)));
    chmodSync(out, 0o755);
    expect(code, stderr).toBe(1);
    expect(stderr).not.toContain('    at ');
    const failed = /^could not save step (\d+), training goes on and tries again at the next save: cannot create the checkpoint directory .*: permission denied \(EACCES\); pass another --out, or give your user write access to it$/m.exec(stderr);
    expect(failed, stderr).not.toBeNull();
    const first = Number(failed![1]);
    const kept = join(out, stepDirName(first - 1));
    expectOneLine({ code, stderr }, new RegExp(`^mdlm: IO_ERROR: cannot create the checkpoint directory ${join(out, `.tmp-${stepDirName(first + 1)}`)}-\\d+: permission denied \\(EACCES\\); pass another --out, or give your user write access to it\\. The run stopped at step ${first + 1} without saving it; ${kept} is the newest checkpoint \\(continue from it with --resume\\)$`));
    expect(latestCheckpoint(out)).toEqual({ dir: kept, step: first - 1 });
    expect(loadCheckpoint(kept).step).toBe(first - 1);
    expect(existsSync(join(out, stepDirName(first)))).toBe(false);
  }, 300_000);
});
