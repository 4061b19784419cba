/** Tiny training runs on the Brown corpus, shared by tests/train and tests/cuda.test.ts. */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'vitest';
import type { Backend } from '../../src/backend/backend.js';
import { resolveConfig } from '../../src/config/load.js';
import type { TrainConfig } from '../../src/config/schema.js';
import { prepareData } from '../../src/data/prepare.js';
import { type RunData, openRunData } from '../../src/train/data.js';
import { Trainer } from '../../src/train/trainer.js';

/** A scratch directory with the Brown corpus prepared as byte-level shards (call `remove` after). */
export async function tinyRunRoot(prefix: string): Promise<{ root: string; dataDir: string; remove: () => void }> {
  const root = mkdtempSync(join(tmpdir(), prefix));
  const dataDir = join(root, 'brown-byte');
  await prepareData({ tokenizer: 'byte', out: dataDir, valFraction: 0.02, seed: 7 });
  return { root, dataDir, remove: () => rmSync(root, { recursive: true, force: true }) };
}

/** A ~0.12M-parameter model: small enough to train for real on two CPU cores in a test. */
export function tinyConfig(root: string, dataDir: string, name: string, overrides: Record<string, string> = {}): TrainConfig {
  return resolveConfig({
    preset: 'tiny',
    overrides: {
      'model.dModel': '64', 'model.nLayers': '2', 'model.nHeads': '4', 'model.ffnHidden': '192', 'model.seqLen': '64',
      'train.batchSize': '8', 'train.steps': '100', 'train.lr': '1e-2', 'train.minLr': '1e-3', 'model.initStd': '0.08',
      'train.evalEvery': '0', 'train.evalBatches': '4', 'train.saveEvery': '0', 'data.path': dataDir, out: join(root, name), backend: 'cpu',
      'train.warmupSteps': String(Math.min(10, Number(overrides['train.steps'] ?? 100))),
      ...overrides,
    },
  });
}

export async function tinyTrainer(config: TrainConfig, backend: Backend, extra: { resume?: boolean; maxSteps?: number } = {}): Promise<Trainer> {
  const data: RunData = await openRunData(config, () => {});
  return new Trainer({ config, backend, train: data.train, val: data.val, tokenizer: data.tokenizer, resume: extra.resume ?? false, log: () => {}, ...(extra.maxSteps ? { maxSteps: extra.maxSteps } : {}) });
}

/** The per-step losses of one run. */
export async function runLosses(config: TrainConfig, backend: Backend, extra: { resume?: boolean; maxSteps?: number } = {}): Promise<number[]> {
  const t = await tinyTrainer(config, backend, extra);
  const { losses } = await t.run();
  t.destroy();
  return [...losses];
}

/**
 * Per-step losses of a bf16 run against an f32 run from the same weights and batches. bf16 keeps
 * 8 significant bits (a rounding is within 2^-9 ≈ 2e-3 relative); the f32 masters and f32 loss
 * keep the two runs from drifting apart, so each step's loss stays within 1e-2 relative (measured
 * on the CPU: at most 1.3e-3 over 20 steps of either objective). A working copy that is not
 * refreshed after the optimizer step, or lost gradients, move the losses by well over 1e-2 within a
 * few steps. The runs must also differ somewhere: the bf16 one really rounded.
 */
export function expectBf16Tracks(f32: readonly number[], bf16: readonly number[]): void {
  expect(bf16.length).toBe(f32.length);
  const rel = f32.map((l, i) => Math.abs(bf16[i]! - l) / l);
  expect(Math.max(...rel), `relative loss differences per step: ${rel.map((r) => r.toExponential(1)).join(' ')}`).toBeLessThan(1e-2);
  expect(Math.max(...rel)).toBeGreaterThan(0);
}
