/** `mdlm eval` on a run's checkpoint evaluates the batches the trainer's eval does, and says so. */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CpuBackend } from '../src/backend/cpu/cpu.js';
import { resolveConfig } from '../src/config/load.js';
import { openPreparedData } from '../src/data/dataset.js';
import { evalBatchCount } from '../src/data/loader.js';
import { prepareData } from '../src/data/prepare.js';
import { openRunData } from '../src/train/data.js';
import { Trainer } from '../src/train/trainer.js';
import { mdlm } from './support/cli.js';

let root: string;
const data = () => join(root, 'data');
const run = () => join(root, 'run');

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), 'mdlm-evalb-'));
  const words = ['the', 'cat', 'sat', 'on', 'a', 'mat', 'and', 'dog', 'ran', 'to', 'house'];
  const docs = Array.from({ length: 40 }, (_, d) => Array.from({ length: 40 }, (_, i) => words[(d * 5 + i * i) % words.length]).join(' '));
  writeFileSync(join(root, 'c.txt'), docs.join('\n\n'));
  await prepareData({ input: join(root, 'c.txt'), tokenizer: 'byte', out: data(), valFraction: 0.3, seed: 2 });
  const config = resolveConfig({
    preset: 'tiny',
    overrides: {
      'model.dModel': '32', 'model.nLayers': '1', 'model.nHeads': '4', 'model.ffnHidden': '64', 'model.seqLen': '16',
      'train.batchSize': '2', 'train.steps': '1', 'train.warmupSteps': '1', 'train.evalEvery': '0', 'train.evalBatches': '2', 'train.saveEvery': '0',
      'data.path': data(), out: run(), backend: 'cpu',
    },
  });
  const d = await openRunData(config, () => {});
  const t = new Trainer({ config, backend: new CpuBackend(), train: d.train, val: d.val, tokenizer: d.tokenizer, resume: false, log: () => {} });
  await t.run();
  t.destroy();
});

afterAll(() => rmSync(root, { recursive: true, force: true }));

describe('mdlm eval batches', () => {
  it("uses the run's train.evalBatches by default, reproducing the trainer's val_loss, and says how to change it", async () => {
    const val = (await openPreparedData(data())).val;
    const all = evalBatchCount(val, { seqLen: 16, batchSize: 2 });
    expect(all).toBeGreaterThan(2);
    const metrics = readFileSync(join(run(), 'metrics.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l) as Record<string, number>);
    const trainerLoss = metrics.filter((m) => 'val_loss' in m).at(-1)!.val_loss!;

    const json = mdlm('eval', '--model', run(), '--data', data(), '--backend', 'cpu', '--json');
    expect(json.code, json.stderr).toBe(0);
    const j = JSON.parse(json.stdout) as { loss: number; batches: number };
    expect(j.batches).toBe(2);
    expect(Math.abs(j.loss - trainerLoss)).toBeLessThan(1e-6);

    const text = mdlm('eval', '--model', run(), '--data', data(), '--backend', 'cpu');
    expect(text.code, text.stderr).toBe(0);
    expect(text.stderr).toContain(`2 of ${all} batches (the run's train.evalBatches, as the trainer's eval; --batches all or a number changes it)`);
    expect(text.stdout).toMatch(/\(2 batches, \d+ tokens/);

    const every = mdlm('eval', '--model', run(), '--data', data(), '--backend', 'cpu', '--batches', 'all', '--json');
    expect(every.code, every.stderr).toBe(0);
    expect((JSON.parse(every.stdout) as { batches: number }).batches).toBe(all);
    const three = mdlm('eval', '--model', run(), '--data', data(), '--backend', 'cpu', '--batches', '3', '--json');
    expect((JSON.parse(three.stdout) as { batches: number }).batches).toBe(3);

    const bad = mdlm('eval', '--model', run(), '--data', data(), '--backend', 'cpu', '--batches', 'some');
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/mdlm: BAD_ARGUMENT: --batches: expected an integer ≥ 1 or all, got "some"/);
  });
});
