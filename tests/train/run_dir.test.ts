/**
 * The run directory's rules (src/train/run_dir.ts): resume needs a checkpoint, a new run refuses
 * an old one without overwrite, one run per directory, leftovers removed, metrics trimmed to the
 * resumed step, and `latest` followed.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { paramSpecs } from '../../src/checkpoint/hf.js';
import { type CheckpointData, latestCheckpoint, resolveModelDir, saveCheckpoint, stepDirName } from '../../src/checkpoint/checkpoint.js';
import { resolveConfig } from '../../src/config/load.js';
import { MdlmError } from '../../src/errors.js';
import { type RunDirOptions, openRunDir } from '../../src/train/run_dir.js';

const root = mkdtempSync(join(tmpdir(), 'mdlm-rundir-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));
let n = 0;
const fresh = (): string => join(root, `run${n++}`);

const config = resolveConfig({ overrides: { 'model.dModel': '16', 'model.nLayers': '1', 'model.nHeads': '2', 'model.ffnHidden': '32', 'model.seqLen': '16' } });

function checkpoint(step: number): CheckpointData {
  const tensors = Object.fromEntries(paramSpecs(config.model).map((p) => [p.name, new Float32Array(p.shape.reduce((a, b) => a * b, 1)).fill(step)]));
  return { config, tensors, trainerState: { step } };
}

function metricsRows(steps: number[], evalAt: number[] = []): string {
  const rows: object[] = [];
  for (const s of steps) {
    rows.push({ step: s, loss: 1 / s });
    if (evalAt.includes(s)) rows.push({ step: s, val_loss: 2 / s });
  }
  return rows.map((r) => `${JSON.stringify(r)}\n`).join('');
}

function open(out: string, opts: Partial<RunDirOptions> = {}): { lines: string[]; run: ReturnType<typeof openRunDir> } {
  const lines: string[] = [];
  const run = openRunDir(out, { resume: false, overwrite: false, log: (l) => lines.push(l), ...opts });
  return { lines, run };
}

function refusal(fn: () => unknown): MdlmError {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(MdlmError);
    expect((e as Error).message).not.toContain('\n');
    return e as MdlmError;
  }
  throw new Error('expected a refusal');
}

describe('--resume', () => {
  it('is an error naming the directory when there is nothing to resume (empty, or damaged checkpoints only)', () => {
    const empty = fresh();
    mkdirSync(empty);
    const e = refusal(() => open(empty, { resume: true }));
    expect(e.code).toBe('NOT_FOUND');
    expect(e.message).toBe(`--resume: ${empty} holds no complete checkpoint to continue from (no step-* directories); run without --resume to start a new run, or pass --resume auto to start a new run when there is nothing to resume`);

    const damaged = fresh();
    saveCheckpoint(damaged, checkpoint(10));
    truncateSync(join(damaged, stepDirName(10), 'model.safetensors'), 100);
    const d = refusal(() => open(damaged, { resume: true }));
    expect(d.code).toBe('BAD_FILE');
    expect(d.message).toMatch(new RegExp(`^--resume: ${damaged} holds no complete checkpoint to continue from \\(found step-0000010 \\(damaged: model\\.safetensors is 100 bytes, the manifest says \\d+\\)\\); run without --resume to start a new run \\(with --overwrite to replace what is there\\)`));
    // Refused before anything changed, and the directory is free again.
    expect(readdirSync(damaged).sort()).toEqual(['latest', 'step-0000010']);
  });

  it('auto starts a new run when there is nothing to resume, and resumes when there is', () => {
    const out = fresh();
    const first = open(out, { resume: 'auto' });
    expect(first.run.resumeFrom).toBeNull();
    expect(first.lines).toEqual([`--resume auto: ${out} holds no complete checkpoint; starting a new run`]);
    first.run.release();
    saveCheckpoint(out, checkpoint(4));
    const second = open(out, { resume: 'auto' });
    expect(second.run.resumeFrom).toEqual({ dir: join(out, stepDirName(4)), step: 4 });
    second.run.release();
  });

  it('continues from the checkpoint latest names, not the highest step', () => {
    const out = fresh();
    saveCheckpoint(out, checkpoint(5));
    saveCheckpoint(out, checkpoint(3)); // latest: step 3
    const { run } = open(out, { resume: true });
    expect(run.resumeFrom).toEqual({ dir: join(out, stepDirName(3)), step: 3 });
    run.release();
  });

  it('drops the metrics rows past the resumed step (training and eval rows, and a torn last line)', () => {
    const out = fresh();
    saveCheckpoint(out, checkpoint(4));
    writeFileSync(join(out, 'metrics.jsonl'), `${metricsRows([1, 2, 3, 4, 5, 6], [2, 4, 6])}{"step":7,"lo`);
    const { lines, run } = open(out, { resume: true });
    run.release();
    expect(readFileSync(join(out, 'metrics.jsonl'), 'utf8')).toBe(metricsRows([1, 2, 3, 4], [2, 4]));
    expect(lines).toContain(`${join(out, 'metrics.jsonl')}: dropped 4 rows past step 4, which this run trains again`);
  });

  it('--overwrite and --resume together are refused', () => {
    expect(refusal(() => open(fresh(), { resume: true, overwrite: true })).message).toMatch(/--overwrite starts a new run and --resume continues one/);
  });
});

describe('a new run', () => {
  it('refuses a directory holding an earlier run, naming what is there', () => {
    const out = fresh();
    saveCheckpoint(out, checkpoint(2));
    writeFileSync(join(out, 'metrics.jsonl'), metricsRows([1, 2]));
    const e = refusal(() => open(out));
    expect(e.code).toBe('BAD_ARGUMENT');
    expect(e.message).toBe(`${out} holds an earlier run (step-0000002, metrics.jsonl, latest; latest is step-0000002); pass --resume to continue it, --overwrite to delete its checkpoints and metrics and start anew, or another --out`);
    // Metrics alone (a run that never saved) count too.
    const metricsOnly = fresh();
    mkdirSync(metricsOnly);
    writeFileSync(join(metricsOnly, 'metrics.jsonl'), metricsRows([1]));
    expect(refusal(() => open(metricsOnly)).message).toMatch(/holds an earlier run \(metrics\.jsonl\)/);
  });

  it('--overwrite deletes the checkpoints, latest and metrics (nothing else) and says so', () => {
    const out = fresh();
    saveCheckpoint(out, checkpoint(1));
    saveCheckpoint(out, checkpoint(2));
    writeFileSync(join(out, 'metrics.jsonl'), metricsRows([1, 2]));
    mkdirSync(join(out, 'data'));
    writeFileSync(join(out, 'data', 'meta.json'), '{}');
    writeFileSync(join(out, 'notes.txt'), 'mine');
    const { lines, run } = open(out, { overwrite: true });
    expect(run.resumeFrom).toBeNull();
    expect(readdirSync(out).sort()).toEqual(['.lock', 'data', 'notes.txt']);
    run.release();
    expect(readdirSync(out).sort()).toEqual(['data', 'notes.txt']);
    expect(lines).toEqual([`--overwrite: removed step-0000002, step-0000001, metrics.jsonl, latest from ${out}`]);
  });

  it('takes an empty directory, or one holding only prepared data, as it is', () => {
    const out = fresh();
    mkdirSync(join(out, 'data'), { recursive: true });
    const { lines, run } = open(out);
    expect(run.resumeFrom).toBeNull();
    expect(lines).toEqual([]);
    run.release();
  });
});

describe('ownership', () => {
  it('removes what interrupted saves and removals left, and says what', () => {
    const out = fresh();
    saveCheckpoint(out, checkpoint(1));
    mkdirSync(join(out, '.tmp-step-0000002-99999'));
    writeFileSync(join(out, '.tmp-step-0000002-99999', 'model.safetensors'), 'partial');
    mkdirSync(join(out, '.deleting-step-0000000-99999'));
    writeFileSync(join(out, '.tmp-latest-99999'), 'step-0000002\n');
    const { lines, run } = open(out, { resume: true });
    run.release();
    expect(readdirSync(out).sort()).toEqual(['latest', 'step-0000001']);
    expect(lines).toEqual([`${out}: removed what an interrupted save or removal left: ${['.deleting-step-0000000-99999', '.tmp-latest-99999', '.tmp-step-0000002-99999'].sort().join(', ')}`]);
  });

  it('refuses a directory another live run holds, and takes over the lock of one that is gone', async () => {
    const out = fresh();
    mkdirSync(out);
    const other = spawn(process.execPath, ['-e', 'setTimeout(() => {}, 60000)'], { stdio: 'ignore' });
    try {
      writeFileSync(join(out, '.lock'), JSON.stringify({ pid: other.pid, host: hostname() }));
      const e = refusal(() => open(out));
      expect(e.message).toBe(`${out} is in use by another mdlm run (pid ${other.pid} on ${hostname()}); wait for it to end or pass another --out (if no run uses it, delete ${join(out, '.lock')})`);
    } finally {
      other.kill();
      await new Promise((resolve) => other.once('exit', resolve));
    }
    const { run } = open(out);
    expect(JSON.parse(readFileSync(join(out, '.lock'), 'utf8'))).toEqual({ pid: process.pid, host: hostname() });
    // While this process holds it, a second opening (another run) would be refused by pid; release frees it.
    run.release();
    expect(existsSync(join(out, '.lock'))).toBe(false);
  });
});

describe('latest is what readers follow', () => {
  it('latestCheckpoint and resolveModelDir take the checkpoint latest names; the highest complete step only when latest is absent, missing or damaged', () => {
    const out = fresh();
    saveCheckpoint(out, checkpoint(8));
    saveCheckpoint(out, checkpoint(9));
    saveCheckpoint(out, checkpoint(6)); // a re-run from step 5 into this directory: latest is step 6
    expect(latestCheckpoint(out)).toEqual({ dir: join(out, stepDirName(6)), step: 6 });
    expect(resolveModelDir(out)).toBe(join(out, stepDirName(6)));
    // latest names a damaged checkpoint: the highest complete one, saying why.
    truncateSync(join(out, stepDirName(6), 'model.safetensors'), 10);
    expect(latestCheckpoint(out)).toEqual({ dir: join(out, stepDirName(9)), step: 9, passedOver: expect.stringMatching(/^latest names step-0000006, which is damaged \(model\.safetensors is 10 bytes/) });
    // latest names a checkpoint that is gone.
    rmSync(join(out, stepDirName(6)), { recursive: true });
    expect(latestCheckpoint(out)).toEqual({ dir: join(out, stepDirName(9)), step: 9, passedOver: 'latest names step-0000006, which does not exist' });
    // No latest at all.
    rmSync(join(out, 'latest'));
    expect(latestCheckpoint(out)).toEqual({ dir: join(out, stepDirName(9)), step: 9 });
  });
});
