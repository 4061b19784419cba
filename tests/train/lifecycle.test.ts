/**
 * A run's life on tiny CPU models: the loop hears a signal, the final checkpoint comes before the
 * final evaluation (whose progress is reported and which a signal stops), a resumed run writes
 * each step's metrics once, and runs of skipped (non-finite) steps stop with nothing new saved.
 */
import { existsSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CpuBackend } from '../../src/backend/cpu/cpu.js';
import { latestCheckpoint, loadCheckpoint, stepDirName } from '../../src/checkpoint/checkpoint.js';
import type { TrainConfig } from '../../src/config/schema.js';
import { openRunData } from '../../src/train/data.js';
import { type EvalProgress, Trainer, type TrainerOptions } from '../../src/train/trainer.js';
import { tinyConfig as tinyIn, tinyRunRoot } from '../support/train.js';

let root: string;
let dataDir: string;
let remove = (): void => {};

beforeAll(async () => {
  ({ root, dataDir, remove } = await tinyRunRoot('mdlm-life-'));
});

afterAll(() => remove());

function tinyConfig(name: string, overrides: Record<string, string> = {}): TrainConfig {
  return tinyIn(root, dataDir, name, overrides);
}

/** A Trainer on the CPU whose log lines are collected. */
async function trainer(config: TrainConfig, extra: Partial<TrainerOptions> = {}): Promise<{ t: Trainer; log: string[] }> {
  const data = await openRunData(config, () => {});
  const log: string[] = [];
  const t = new Trainer({ config, backend: new CpuBackend(), train: data.train, val: data.val, tokenizer: data.tokenizer, resume: false, log: (l) => log.push(l), ...extra });
  return { t, log };
}

interface Row {
  step: number;
  loss?: number;
  val_loss?: number;
  skipped?: boolean;
}

function metrics(out: string): Row[] {
  return readFileSync(join(out, 'metrics.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l) as Row);
}

function stepDirs(out: string): string[] {
  return readdirSync(out).filter((f) => f.startsWith('step-')).sort();
}

describe('signals', () => {
  // On the CPU backend a step awaits only settled promises: without turns of the event loop a
  // timer (or a signal handler) never runs while the loop does, and the run ignores the abort.
  it('the loop gives the event loop turns: a timer that aborts mid-run stops it after the step, with a checkpoint', async () => {
    const cfg = tinyConfig('timer-abort', { 'train.steps': '400', 'train.evalBatches': '1' });
    const ac = new AbortController();
    const { t, log } = await trainer(cfg, { signal: ac.signal, onStep: (m) => { if (m.step === 1) setTimeout(() => ac.abort('SIGINT'), 0); } });
    const result = await t.run();
    t.destroy();
    expect(result.interrupted).toBe(true);
    expect(result.step).toBeLessThan(20);
    expect(result.checkpoint).toBe(join(cfg.out, stepDirName(result.step)));
    expect(loadCheckpoint(result.checkpoint!).step).toBe(result.step);
    expect(log.filter((l) => l.includes('val_loss'))).toEqual([]); // no evaluation after the signal
    expect(metrics(cfg.out).map((r) => r.step)).toEqual(Array.from({ length: result.step }, (_, i) => i + 1));
  });
});

describe('the final evaluation', () => {
  it('comes after the final checkpoint and reports its progress batch by batch', async () => {
    const cfg = tinyConfig('final-eval', { 'train.steps': '2', 'train.evalBatches': '3' });
    const events: EvalProgress[] = [];
    const { t, log } = await trainer(cfg, { onEval: (p) => events.push(p) });
    await t.run();
    t.destroy();
    expect(events).toEqual([0, 1, 2, 3].map((done) => ({ step: 2, done, total: 3 })));
    const saved = log.findIndex((l) => l === `saved ${join(cfg.out, stepDirName(2))}`);
    const evaluated = log.findIndex((l) => l.startsWith('step 2: val_loss'));
    expect(saved).toBeGreaterThanOrEqual(0);
    expect(evaluated).toBeGreaterThan(saved);
  });

  it('a signal during it stops it; the checkpoint saved before it stands', async () => {
    const cfg = tinyConfig('eval-abort', { 'train.steps': '2', 'train.evalBatches': '4' });
    const ac = new AbortController();
    const { t } = await trainer(cfg, { signal: ac.signal, onEval: (p) => { if (p.done === 1) ac.abort('SIGTERM'); } });
    const result = await t.run();
    t.destroy();
    expect(result).toMatchObject({ step: 2, interrupted: true, lastEval: undefined, checkpoint: join(cfg.out, stepDirName(2)) });
    expect(metrics(cfg.out).filter((r) => 'val_loss' in r)).toEqual([]);
    expect(latestCheckpoint(cfg.out)?.step).toBe(2);
  });
});

describe('resuming', () => {
  it("a run killed between a step's metrics and its save, resumed, has each step's rows once", async () => {
    const cfg = tinyConfig('resume-metrics', { 'train.steps': '4', 'train.saveEvery': '2', 'train.evalEvery': '2', 'train.evalBatches': '1', 'train.keepCheckpoints': '0' });
    const first = await trainer(cfg);
    await first.t.run();
    first.t.destroy();
    // As if killed after step 4's metrics, before its checkpoint.
    rmSync(join(cfg.out, stepDirName(4)), { recursive: true });
    writeFileSync(join(cfg.out, 'latest'), `${stepDirName(2)}\n`);
    const straight = metrics(cfg.out);
    const again = await trainer(cfg, { resume: true });
    await again.t.run();
    again.t.destroy();
    expect(again.log).toContain(`resumed from ${join(cfg.out, stepDirName(2))} at step 2`);
    const rows = metrics(cfg.out);
    expect(rows.map((r) => [r.step, 'val_loss' in r ? 'eval' : 'train'])).toEqual([[1, 'train'], [2, 'train'], [2, 'eval'], [3, 'train'], [4, 'train'], [4, 'eval']]);
    // The resumed steps repeat the straight run's losses.
    expect(rows.map((r) => r.loss ?? r.val_loss)).toEqual(straight.map((r) => r.loss ?? r.val_loss));
  });
});

describe('skipped steps', () => {
  async function poisoned(name: string, overrides: Record<string, string>): Promise<{ t: Trainer; cfg: TrainConfig }> {
    const cfg = tinyConfig(name, { 'train.nonFinite': 'skip', 'train.evalBatches': '1', ...overrides });
    const { t } = await trainer(cfg);
    const values = (await t.model.backend.download(t.model.store.value)) as Float32Array;
    values[0] = NaN;
    t.model.backend.upload(t.model.store.value, values);
    return { t, cfg };
  }

  it('train.maxSkippedSteps skipped steps in a row stop the run, with nothing saved', async () => {
    const { t, cfg } = await poisoned('nan-streak', { 'train.steps': '20', 'train.maxSkippedSteps': '4', 'train.saveEvery': '1' });
    await expect(t.run()).rejects.toThrow(/^4 steps in a row \(through step 4\) had a non-finite loss or gradient norm and were skipped \(train\.nonFinite skip, train\.maxSkippedSteps 4\); the run stopped and saved nothing new\. Lower train\.lr/);
    t.destroy();
    expect(metrics(cfg.out).map((r) => [r.step, r.skipped])).toEqual([[1, true], [2, true], [3, true], [4, true]]);
    expect(stepDirs(cfg.out)).toEqual([]);
    expect(existsSync(join(cfg.out, 'latest'))).toBe(false);
  });

  it('a run whose every step is skipped fails at its end however few', async () => {
    const { t, cfg } = await poisoned('nan-all', { 'train.steps': '3', 'train.saveEvery': '2' });
    await expect(t.run()).rejects.toThrow(/^all 3 steps \(through step 3\) had a non-finite loss or gradient norm and were skipped \(train\.nonFinite skip, train\.maxSkippedSteps 10\); the run stopped and saved nothing new\./);
    t.destroy();
    expect(stepDirs(cfg.out)).toEqual([]);
  });
});
