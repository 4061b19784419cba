/**
 * The one run setup of the Trainer and `mdlm bench train`, and the two kernel settings a run
 * chooses: train.deterministic and train.gemmAutotune, from the config to the op attribute and
 * the backend call, and into the checkpoint's config.
 */
import { afterAll, describe, expect, it } from 'vitest';
import type { KernelSettings } from '../../src/backend/backend.js';
import { CpuBackend } from '../../src/backend/cpu/cpu.js';
import { syntheticBatches } from '../../src/bench/train.js';
import { loadModel } from '../../src/checkpoint/checkpoint.js';
import { configFields, resolveConfig } from '../../src/config/load.js';
import type { TrainConfig } from '../../src/config/schema.js';
import { MdlmError } from '../../src/errors.js';
import type { AttentionAttrs } from '../../src/ops/attention.js';
import type { OpDef } from '../../src/ops/op.js';
import { setUpRun } from '../../src/train/setup.js';
import { Lookahead, optimizerStep } from '../../src/train/step.js';
import type { Tensor } from '../../src/tensor.js';
import { tinyConfig, tinyRunRoot, tinyTrainer } from '../support/train.js';

/** A CPU backend that keeps the kernel settings it is given and the attributes of each attention_backward. */
class RecordingCpu extends CpuBackend {
  readonly settings: KernelSettings[] = [];
  readonly attentionBackward: AttentionAttrs[] = [];

  configureKernels(settings: KernelSettings): void {
    this.settings.push(settings);
  }

  override run<A>(op: OpDef<A>, args: Readonly<Record<string, Tensor>>, attrs: A): void {
    if (op.name === 'attention_backward') this.attentionBackward.push(attrs as AttentionAttrs);
    super.run(op, args, attrs);
  }
}

const small = (over: Record<string, string> = {}): TrainConfig =>
  resolveConfig({ preset: 'tiny', overrides: { 'model.dModel': '64', 'model.nLayers': '2', 'model.nHeads': '4', 'model.ffnHidden': '128', 'model.seqLen': '16', 'train.batchSize': '2', ...over } });

function badConfig(over: Record<string, string>): string {
  try {
    small(over);
  } catch (e) {
    expect(e).toBeInstanceOf(MdlmError);
    expect((e as MdlmError).code).toBe('BAD_CONFIG');
    return (e as MdlmError).message;
  }
  throw new Error('expected a BAD_CONFIG error');
}

/** One training step of `cfg` set up on a recording backend: what the backend was told and what attention_backward was asked. */
async function oneStep(cfg: TrainConfig): Promise<RecordingCpu> {
  const b = new RecordingCpu();
  const maskId = cfg.objective.maskTokenId;
  const run = setUpRun(cfg, b, { maskId });
  expect(run.dtype).toBe('f32');
  const batches = new Lookahead(syntheticBatches(cfg.train.batchSize, cfg.model.seqLen, maskId, cfg.train.seed), () => undefined);
  const { loss } = await optimizerStep(run, batches, 0, 1, cfg.train.lr, 'stop');
  expect(Number.isFinite(loss)).toBe(true);
  run.optimizer.destroy();
  run.model.destroy();
  return b;
}

describe('train.deterministic and train.gemmAutotune', () => {
  it('default to off and 8, are listed with the config fields, and reject values out of range', () => {
    const t = small().train;
    expect(t.deterministic).toBe(false);
    expect(t.gemmAutotune).toBe(8);
    const fields = new Map(configFields().map((f) => [f.path, f]));
    expect(fields.get('train.deterministic')).toMatchObject({ type: 'boolean', default: false });
    expect(fields.get('train.gemmAutotune')).toMatchObject({ type: 'integer', default: 8, min: 0, max: 64 });
    expect(small({ 'train.deterministic': 'true', 'train.gemmAutotune': '0' }).train).toMatchObject({ deterministic: true, gemmAutotune: 0 });
    expect(small({ 'train.gemmAutotune': '64' }).train.gemmAutotune).toBe(64);
    for (const v of ['65', '-1', '2.5']) expect(badConfig({ 'train.gemmAutotune': v })).toContain(`train.gemmAutotune: got ${v}`);
    expect(badConfig({ 'train.deterministic': 'maybe' })).toContain('train.deterministic: got "maybe"');
  });

  it('reach the backend (GEMM candidates timed) and the attention backward (its deterministic attribute)', async () => {
    const plain = await oneStep(small({ 'train.gemmAutotune': '20' }));
    expect(plain.settings).toEqual([{ gemmAutotune: 20 }]);
    expect(plain.attentionBackward).toHaveLength(2);
    for (const a of plain.attentionBackward) expect(a.deterministic).toBeUndefined();

    const det = await oneStep(small({ 'train.gemmAutotune': '20', 'train.deterministic': 'true' }));
    // Deterministic: the heuristic's first GEMM algorithm, not the fastest of a timing.
    expect(det.settings).toEqual([{ gemmAutotune: 0 }]);
    expect(det.attentionBackward).toHaveLength(2);
    for (const a of det.attentionBackward) expect(a.deterministic).toBe(true);
  });
});

describe('the checkpoint', () => {
  const roots: (() => void)[] = [];
  afterAll(() => roots.forEach((remove) => remove()));

  it("saves both fields in its config, as the run's other settings", async () => {
    const { root, dataDir, remove } = await tinyRunRoot('mdlm-setup-');
    roots.push(remove);
    const cfg = tinyConfig(root, dataDir, 'fields', { 'train.steps': '1', 'train.deterministic': 'true', 'train.gemmAutotune': '3' });
    const t = await tinyTrainer(cfg, new CpuBackend());
    const { checkpoint } = await t.run();
    t.destroy();
    expect(loadModel(checkpoint!).config?.train).toMatchObject({ deterministic: true, gemmAutotune: 3 });
  });
});

describe('train.recompute full', () => {
  it('trains a step as the others do, and is refused with train.precision fp8, saying why', async () => {
    await oneStep(small({ 'train.recompute': 'full' }));
    const cfg = small({ 'train.recompute': 'full', 'train.precision': 'fp8' });
    let message = '';
    try {
      setUpRun(cfg, new CpuBackend(), { maskId: cfg.objective.maskTokenId });
    } catch (e) {
      expect((e as MdlmError).code).toBe('BAD_CONFIG');
      message = (e as MdlmError).message;
    }
    expect(message).toContain('train.recompute full runs each block\'s forward twice a step, which would record every FP8 amax twice');
  });
});
