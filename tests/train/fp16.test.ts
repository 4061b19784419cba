/**
 * FP16 training on the CPU backend (f16 activations and working copy, f32 masters and gradients)
 * with dynamic loss scaling: it learns and tracks f32; overflowing steps are skipped and back the
 * scale off, good steps grow it, and neither is a non-finite step for train.nonFinite; a resume
 * gives the losses and scales of an uninterrupted run bit for bit (the scale is in the
 * checkpoint); fp16 where a backend has no f16 kernels is a clear error.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Backend } from '../../src/backend/backend.js';
import { CpuBackend } from '../../src/backend/cpu/cpu.js';
import { latestCheckpoint, loadCheckpoint } from '../../src/checkpoint/checkpoint.js';
import { resolveConfig } from '../../src/config/load.js';
import type { TrainConfig } from '../../src/config/schema.js';
import { openRunData } from '../../src/train/data.js';
import { type LossScaleState, LossScaler } from '../../src/train/loss_scale.js';
import { computeDtype } from '../../src/train/setup.js';
import { type StepMetrics, Trainer } from '../../src/train/trainer.js';
import { runLosses, tinyConfig, tinyRunRoot, tinyTrainer } from '../support/train.js';

/** The step lines of a run's metrics.jsonl. */
function stepMetrics(cfg: TrainConfig): StepMetrics[] {
  return readFileSync(join(cfg.out, 'metrics.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l) as StepMetrics & { val_loss?: number }).filter((m) => m.val_loss === undefined);
}

/**
 * Each step's loss scale from the step before: halved after an overflow (a skipped step), doubled
 * after `growthInterval` good steps in a row since it last changed, else the same. Returns the
 * scale of the step after the last.
 */
function expectScaleRule(steps: readonly StepMetrics[], growthInterval: number, initialScale: number): number {
  let scale = initialScale;
  let good = 0;
  for (const m of steps) {
    expect(m.loss_scale, `step ${m.step}`).toBe(scale);
    if (m.skipped) {
      scale /= 2;
      good = 0;
    } else if (++good === growthInterval) {
      scale *= 2;
      good = 0;
    }
  }
  return scale;
}

describe('train.precision fp16 (cpu)', () => {
  let r: { root: string; dataDir: string; remove: () => void };
  beforeAll(async () => {
    r = await tinyRunRoot('mdlm-fp16-');
  });
  afterAll(() => r.remove());
  const cfg = (name: string, over: Record<string, string>) =>
    tinyConfig(r.root, r.dataDir, name, { 'objective.kind': 'ar', 'train.steps': '8', 'train.evalBatches': '1', ...over });

  // f16 keeps 11 significant bits (a rounding is within 2^-11 ≈ 4.9e-4 relative), and the f32
  // masters, gradients and loss keep the runs from drifting apart: each step's loss stays within
  // 1e-3 of f32's (measured: at most ~1e-4 over 12 steps of either objective, where bf16 gives
  // ~2e-3); lost gradients move it by far more. AdamW and clipping to a norm the gradients exceed
  // hardly see a constant factor on the gradients, so the loss scale's undoing is held to account
  // by the reported norm: the true gradient's, as f32 reports it, not 65536 times it.
  it('learns and tracks f32 within 1e-3 a step, at the default loss scale', async () => {
    const f32Config = cfg('f32', {});
    const f32 = await runLosses(f32Config, new CpuBackend());
    const c = cfg('fp16', { 'train.precision': 'fp16' });
    const t = await tinyTrainer(c, new CpuBackend());
    expect(t.model.dtype).toBe('f16');
    expect(t.model.store.workingCopy!.dtype).toBe('f16');
    expect(t.model.store.grad.dtype).toBe('f32');
    const { losses } = await t.run();
    t.destroy();
    const rel = f32.map((l, i) => Math.abs(losses[i]! - l) / l);
    expect(Math.max(...rel), rel.map((x) => x.toExponential(1)).join(' ')).toBeLessThan(1e-3);
    expect(Math.max(...rel)).toBeGreaterThan(0);
    expect(losses.at(-1)!).toBeLessThan(losses[0]! * 0.85);
    const steps = stepMetrics(c);
    expect(steps.every((m) => m.loss_scale === 65536 && !m.skipped)).toBe(true);
    const norms = stepMetrics(f32Config).map((m, i) => Math.abs(steps[i]!.grad_norm - m.grad_norm) / m.grad_norm);
    expect(Math.max(...norms), norms.map((x) => x.toExponential(1)).join(' ')).toBeLessThan(1e-2);
  });

  // A loss scale of 2^30 overflows f16 at the loss gradient itself (2^30 / 512 tokens): the first
  // steps are skipped, each halving the scale, until the gradients fit; then good steps grow it
  // again. Under nonFinite stop and maxSkippedSteps 1 none of this stops the run.
  it('backs an overflowing scale off with the steps skipped, grows it after growthInterval good steps, and goes on', async () => {
    const c = cfg('overflow', { 'train.precision': 'fp16', 'train.fp16.initialScale': String(2 ** 30), 'train.fp16.growthInterval': '2', 'train.steps': '14', 'train.maxSkippedSteps': '1' });
    const log: string[] = [];
    const data = await openRunData(c, () => {});
    const t = new Trainer({ config: c, backend: new CpuBackend(), train: data.train, val: data.val, tokenizer: data.tokenizer, resume: false, log: (l) => log.push(l) });
    const masters0 = Float32Array.from((await t.model.backend.download(t.model.store.value)) as Float32Array);
    const { losses, step } = await t.run();
    expect(step).toBe(14);
    const steps = stepMetrics(c);
    expect(steps.length).toBe(14);
    const next = expectScaleRule(steps, 2, 2 ** 30);
    const overflows = steps.findIndex((m) => !m.skipped);
    expect(overflows).toBeGreaterThan(2);
    expect(steps.slice(0, overflows).every((m) => m.skipped && m.grad_norm === null)).toBe(true);
    expect(steps.some((m, i) => i > 0 && m.loss_scale! > steps[i - 1]!.loss_scale!)).toBe(true);
    expect(log).toContain(`step 1: the gradients overflowed at loss scale ${2 ** 30}; the update was skipped and the scale backs off to ${2 ** 29}`);
    expect(log.some((l) => /steps in a row without an overflow; the loss scale grows to \d+/.test(l))).toBe(true);
    // The reported norm is the unscaled gradient's: of the order of f32's (a few units), not 2^20 times it.
    const good = steps.filter((m) => !m.skipped);
    expect(Math.max(...good.map((m) => m.grad_norm))).toBeLessThan(100);
    expect(losses.at(-1)!).toBeLessThan(losses[overflows]!);
    // The checkpoint holds the scale the next step runs with.
    const ck = loadCheckpoint(latestCheckpoint(c.out)!.dir);
    expect((ck.trainerState.lossScale as LossScaleState).scale).toBe(next);
    t.destroy();
    // The skipped steps left the masters alone: a run that overflowed every step so far has its initial weights.
    const untrained = await tinyTrainer(cfg('untrained', { 'train.precision': 'fp16', 'train.fp16.initialScale': String(2 ** 30), 'train.steps': '2' }), new CpuBackend());
    await untrained.run();
    expect(Array.from((await untrained.model.backend.download(untrained.model.store.value)) as Float32Array)).toEqual(Array.from(masters0));
    untrained.destroy();
  });

  it('N steps + resume gives exactly the losses and loss scales of an uninterrupted run (an overflow, growth, accumulation)', async () => {
    const over = { 'train.precision': 'fp16', 'train.fp16.initialScale': String(2 ** 22), 'train.fp16.growthInterval': '1', 'train.gradAccum': '2', 'train.steps': '4', 'train.saveEvery': '2' };
    const straight = cfg('straight', over);
    const all = await runLosses(straight, new CpuBackend());
    const resumed = cfg('resumed', over);
    const first = await runLosses(resumed, new CpuBackend(), { maxSteps: 2 });
    const saved = loadCheckpoint(latestCheckpoint(resumed.out)!.dir).trainerState.lossScale as LossScaleState;
    const rest = await runLosses(resumed, new CpuBackend(), { resume: true });
    expect([...first, ...rest]).toEqual(all);
    const scales = stepMetrics(straight).map((m) => m.loss_scale);
    expect(stepMetrics(resumed).map((m) => m.loss_scale)).toEqual(scales);
    // The run both backed off (its first step overflows at 2^22) and grew, and the checkpoint holds
    // the scale step 3 ran with.
    expect(stepMetrics(straight).some((m) => m.skipped)).toBe(true);
    expect(scales.some((x, i) => i > 0 && x! > scales[i - 1]!)).toBe(true);
    expect(saved.scale).toBe(scales[2]);
  });
});

describe('fp16 loss scaling and setup', () => {
  it('stops with a clear error when the scale would back off below 1', () => {
    const s = new LossScaler({ initialScale: 4, growthInterval: 10 });
    expect(s.update(false, 1)).toBe('backoff');
    expect(s.update(false, 2)).toBe('backoff');
    expect(s.scale).toBe(1);
    expect(() => s.update(false, 3)).toThrow(/the gradients overflowed in 3 steps in a row \(through step 3\), the loss scale backed off to 1 and they still overflow/);
  });

  it('refuses a saved scale state that is not one', () => {
    const s = new LossScaler({ initialScale: 4, growthInterval: 10 });
    expect(() => s.restore({ scale: 3, goodSteps: 0, overflows: 0 }, 'ck')).toThrow(/ck: the saved loss scale state/);
    s.restore({ scale: 8, goodSteps: 9, overflows: 0 }, 'ck');
    expect(s.update(true, 1)).toBe('growth');
    expect(s.scale).toBe(16);
  });

  it('refuses fp16 on a backend without f16 kernels, saying where it runs', () => {
    const cuda = { name: 'cuda', floatDtypes: new Set(['f32', 'bf16']) } as unknown as Backend;
    expect(() => computeDtype('fp16', cuda)).toThrow(
      /train\.precision fp16: the cuda backend computes in f32 or bf16 only; fp16 \(f16 compute with loss scaling\) runs on the cpu backend only: the CUDA kernels are bf16\/f32, the WebGPU kernels f32; use train\.precision auto/,
    );
    expect(computeDtype('fp16', new CpuBackend())).toBe('f16');
  });

  it('takes a power-of-two initial scale only', () => {
    expect(() => resolveConfig({ preset: 'tiny', overrides: { 'train.precision': 'fp16', 'train.fp16.initialScale': '1000' } })).toThrow(/initialScale.*power of two/s);
    expect(resolveConfig({ preset: 'tiny', overrides: { 'train.precision': 'fp16' } }).train.fp16).toEqual({ initialScale: 65536, growthInterval: 2000 });
  });
});
