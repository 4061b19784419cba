/**
 * End to end on tiny models: learning on the Brown corpus (both objectives), bit-exact resume,
 * checkpoint round trip, same masks and first loss on CPU and WebGPU.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Backend } from '../../src/backend/backend.js';
import { CpuBackend } from '../../src/backend/cpu/cpu.js';
import { bf16ToF32, f32ToBf16 } from '../../src/convert.js';
import type { TrainConfig } from '../../src/config/schema.js';
import type { Tensor } from '../../src/tensor.js';
import { createLoader } from '../../src/data/loader.js';
import { learningRate } from '../../src/optim/lr.js';
import { openRunData } from '../../src/train/data.js';
import { computeDtype } from '../../src/train/setup.js';
import type { Trainer } from '../../src/train/trainer.js';
import { expectBf16Tracks, runLosses as runOn, tinyConfig as tinyIn, tinyRunRoot, tinyTrainer } from '../support/train.js';
import { hasWebGpu, webgpuBackend } from '../support/webgpu.js';

let root: string;
let dataDir: string;
let remove = (): void => {};

beforeAll(async () => {
  ({ root, dataDir, remove } = await tinyRunRoot('mdlm-train-'));
});

afterAll(() => remove());

function tinyConfig(name: string, overrides: Record<string, string> = {}): TrainConfig {
  return tinyIn(root, dataDir, name, overrides);
}

function trainer(config: TrainConfig, backend: Backend, extra: { resume?: boolean; maxSteps?: number } = {}): Promise<Trainer> {
  return tinyTrainer(config, backend, extra);
}

/** The per-step losses of one CPU run. */
function runLosses(config: TrainConfig, extra: { resume?: boolean; maxSteps?: number } = {}): Promise<number[]> {
  return runOn(config, new CpuBackend(), extra);
}

/** The losses of `first` steps, then of a resumed run to the end: a straight run's, if resume is exact. */
async function lossesAcrossResume(config: TrainConfig, first: number): Promise<number[]> {
  return [...(await runLosses(config, { maxSteps: first })), ...(await runLosses(config, { resume: true }))];
}

describe('training', () => {
  // Byte-level English: a uniform guess costs ln(259) ≈ 5.56 nats/token and the unigram byte
  // entropy of Brown is 3.08. Below 2.9 (AR) the model uses context beyond letter frequencies.
  // (initStd 0.08: at 0.02 this 64-wide model sits on the unigram plateau for ~200 steps.)
  for (const objective of ['ar', 'mdlm'] as const) {
    it(`the tiny ${objective} model learns on the Brown corpus`, async () => {
      const cfg = tinyConfig(`learn-${objective}`, { 'objective.kind': objective });
      const t = await trainer(cfg, new CpuBackend());
      const before = await t.evaluate();
      const result = await t.run();
      t.destroy();
      expect(result.step).toBe(100);
      expect(before!.val_loss).toBeGreaterThan(5);
      // The mdlm bound is looser than AR's loss (it also pays for the order of unmasking).
      expect(result.lastEval!.val_loss).toBeLessThan(objective === 'ar' ? 2.9 : 3.3);
      const lines = readFileSync(join(cfg.out, 'metrics.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l) as Record<string, number>);
      expect(lines[0]).toHaveProperty('loss');
      expect(lines[0]).toHaveProperty('lr');
      expect(lines[0]).toHaveProperty('tokens_per_s');
      expect(lines.at(-1)).toHaveProperty('val_loss');
    }, 600_000); // 100 steps: generous, for slow machines and busy cores
  }

  it('N steps + resume N steps gives exactly the losses of 2N uninterrupted steps (mdlm, accumulation)', async () => {
    const over = { 'objective.kind': 'mdlm', 'train.steps': '6', 'train.gradAccum': '2', 'train.saveEvery': '3' };
    const all = await runLosses(tinyConfig('straight', over));
    expect(await lossesAcrossResume(tinyConfig('resumed', over), 3)).toEqual(all);
  }, 300_000);

  it('mdlm with empirical weighting and random-length truncation: other losses than elbo, same after a resume', async () => {
    const over = {
      'objective.kind': 'mdlm', 'objective.weighting': 'empirical', 'objective.varilenProb': '0.5', 'train.steps': '4', 'train.saveEvery': '2',
      'train.evalBatches': '1', 'objective.evalNoiseLevels': '1', 'train.batchSize': '4',
    };
    const all = await runLosses(tinyConfig('megadlm-straight', over));
    const elboLosses = await runLosses(tinyConfig('megadlm-elbo', { ...over, 'objective.weighting': 'elbo', 'objective.varilenProb': '0' }), { maxSteps: 1 });
    for (const l of all) expect(Number.isFinite(l)).toBe(true);
    expect(all[0]).not.toBe(elboLosses[0]);
    expect(await lossesAcrossResume(tinyConfig('megadlm-resumed', over), 2)).toEqual(all);
  });

  it('20 mdlm steps with bf16 activations and working weights track the f32 losses (same weights, same batches)', async () => {
    const over = { 'objective.kind': 'mdlm', 'train.steps': '20', 'train.warmupSteps': '5', 'train.evalBatches': '1' };
    const f32 = await runLosses(tinyConfig('precision-f32', { ...over, 'train.precision': 'f32' }));
    const cpu = new CpuBackend();
    const t = await trainer(tinyConfig('precision-bf16', { ...over, 'train.precision': 'bf16' }), cpu);
    expect(t.model.dtype).toBe('bf16');
    expect(t.model.store.list[0]!.compute.dtype).toBe('bf16');
    expect(t.model.store.value.dtype).toBe('f32');
    const { losses } = await t.run();
    // The working copy is the masters rounded to bf16 after the last step (adamw_cast writes it
    // over both ranges, decayed and not).
    const masters = (await cpu.download(t.model.store.value)) as Float32Array;
    const work = (await cpu.download(t.model.store.workingCopy!)) as Float32Array;
    expect(Array.from(work)).toEqual(Array.from(masters, (v) => bf16ToF32(f32ToBf16(v))));
    t.destroy();
    expectBf16Tracks(f32, losses);
  }, 120_000);

  it('refuses bf16 on a backend whose kernels compute in f32 only', async () => {
    const f32Only = { name: 'webgpu', floatDtypes: new Set(['f32']) } as unknown as Backend;
    expect(() => computeDtype('bf16', f32Only)).toThrow(/train.precision bf16: the webgpu backend computes in f32 only/);
    expect(computeDtype('auto', f32Only)).toBe('f32');
    expect(computeDtype('auto', { name: 'cuda', floatDtypes: new Set(['f32', 'bf16']) } as unknown as Backend)).toBe('bf16');
  });

  it('refuses at setup, before any step, a validation split too small for one eval batch', async () => {
    // Brown's byte-level val split is ~10^5 tokens: fewer than 8 windows of 20001.
    const cfg = tinyConfig('tiny-val', { 'model.seqLen': '20000' });
    await expect(trainer(cfg, new CpuBackend())).rejects.toThrow(/validation tokens make \d windows of 20001, fewer than one eval batch \(8 rows × world size 1\); lower --train.batchSize or --model.seqLen/);
    expect(existsSync(join(cfg.out, 'metrics.jsonl'))).toBe(false);
  });

  // The update is queued without reading the norm: the device's AdamW must itself leave the
  // parameters and moments alone when the norm is not finite.
  it('a step with non-finite gradients changes no parameter or moment (skip), or stops the run (stop)', async () => {
    for (const mode of ['skip', 'stop'] as const) {
      const cfg = tinyConfig(`nonfinite-${mode}`, { 'train.steps': '1', 'train.nonFinite': mode });
      const cpu = new CpuBackend();
      const t = await trainer(cfg, cpu);
      const poisoned = (await cpu.download(t.model.store.value)) as Float32Array;
      poisoned[0] = NaN;
      cpu.upload(t.model.store.value, poisoned);
      if (mode === 'stop') {
        await expect(t.run()).rejects.toThrow(/non-finite (loss|gradient norm) at step 0/);
      } else {
        // Its one step skipped, the run stops with an error rather than saving as if fine.
        await expect(t.run()).rejects.toThrow(/all 1 steps \(through step 1\) had a non-finite loss or gradient norm and were skipped/);
        expect(existsSync(join(cfg.out, 'latest'))).toBe(false);
        const metrics = readFileSync(join(cfg.out, 'metrics.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l) as { step: number; loss?: number; skipped?: boolean });
        expect(metrics.filter((m) => m.step === 1 && 'loss' in m).map((m) => m.skipped)).toEqual([true]);
      }
      expect(await cpu.download(t.model.store.value)).toEqual(poisoned);
      expect(Array.from((await cpu.download(t.optimizer.m)) as Float32Array).every((x) => x === 0)).toBe(true);
      expect(Array.from((await cpu.download(t.optimizer.v)) as Float32Array).every((x) => x === 0)).toBe(true);
      t.destroy();
    }
  });

  // The Trainer defers each step's AdamW into the next step's pass (and flushes it at the end):
  // the same arithmetic in the same order as updating at once.
  it('the deferred update gives the losses and parameters of updating at the end of each step', async () => {
    const cfg = tinyConfig('deferred', { 'train.steps': '3', 'train.gradAccum': '2' });
    const deferred = await trainer(cfg, new CpuBackend());
    const { losses } = await deferred.run();
    const cpu = new CpuBackend();
    const t = await trainer(cfg, cpu);
    const data = await openRunData(cfg, () => {});
    const loader = createLoader(data.train, { seqLen: cfg.model.seqLen, batchSize: cfg.train.batchSize, seed: cfg.train.seed, mode: cfg.data.mode });
    const schedule = { lr: cfg.train.lr, minLr: cfg.train.minLr, warmupSteps: cfg.train.warmupSteps, totalSteps: cfg.train.steps, decay: cfg.train.decay, wsdDecayFraction: cfg.train.wsdDecayFraction };
    t.model.setLossScale(1 / 2);
    const atOnce: number[] = [];
    for (let step = 0; step < 3; step++) {
      let loss = 0;
      for (let micro = 0; micro < 2; micro++) {
        await t.objective.prepare(t.model, loader.next(), step * 2 + micro);
        t.model.forwardBackward(micro === 0);
        loss += (await t.model.loss()) / 2;
      }
      t.optimizer.measure();
      t.optimizer.update(learningRate(schedule, step), step + 1);
      atOnce.push(loss);
    }
    expect(losses).toEqual(atOnce);
    // The index of the first value that differs (vitest's diff of 10⁵ floats takes minutes).
    const firstDifference = async (a: Tensor, b: Tensor) => {
      const [x, y] = [await deferred.model.backend.download(a), await cpu.download(b)];
      return x.findIndex((v, i) => !Object.is(v, y[i]));
    };
    expect(await firstDifference(deferred.model.store.value, t.model.store.value)).toBe(-1);
    expect(await firstDifference(deferred.optimizer.v, t.optimizer.v)).toBe(-1);
    deferred.destroy();
    t.destroy();
  });

  it('a checkpoint round-trips parameters and optimizer state bit-exactly', async () => {
    const cfg = tinyConfig('roundtrip', { 'train.steps': '2' });
    const cpu = new CpuBackend();
    const t = await trainer(cfg, cpu);
    await t.run();
    const params = await cpu.download(t.model.store.value);
    const m = await cpu.download(t.optimizer.m);
    t.destroy();
    const cpu2 = new CpuBackend();
    const t2 = await trainer(cfg, cpu2, { resume: true });
    await t2.restore();
    expect(await cpu2.download(t2.model.store.value)).toEqual(params);
    expect(await cpu2.download(t2.optimizer.m)).toEqual(m);
    t2.destroy();
  });

  it.skipIf(!hasWebGpu)('the same seed gives the same masks and first-step loss on CPU and WebGPU', async () => {
    const cfg = tinyConfig('xbackend', { 'objective.kind': 'mdlm', 'train.steps': '1' });
    const gpu = (await webgpuBackend())!;
    const results = [];
    for (const backend of [new CpuBackend(), gpu]) {
      const t = await trainer(cfg, backend, { maxSteps: 1 });
      const data = await openRunData(cfg, () => {});
      const loader = (await import('../../src/data/loader.js')).createLoader(data.train, { seqLen: cfg.model.seqLen, batchSize: cfg.train.batchSize, seed: cfg.train.seed, mode: cfg.data.mode });
      await t.objective.prepare(t.model, loader.next(), 0);
      const { ids, weights } = await t.model.downloadInputs();
      t.model.forward();
      results.push({ ids, weights, loss: await t.model.loss() });
      t.destroy();
    }
    expect(results[1]!.ids).toEqual(results[0]!.ids);
    expect(results[1]!.weights).toEqual(results[0]!.weights);
    expect(Math.abs(results[1]!.loss - results[0]!.loss) / results[0]!.loss).toBeLessThan(1e-4);
  });
});
