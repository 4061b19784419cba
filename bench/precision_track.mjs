// bf16 mixed precision against f32 on the CPU backend: the same tiny model, weights and batches
// (Brown, byte tokenizer), 20 steps of each objective, per-step relative loss difference. The f32
// run is the peer. Needs dist/ (npm run build). Usage: node bench/precision_track.mjs [steps]
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
const { CpuBackend } = await import('../dist/backend/cpu/cpu.js');
const { resolveConfig } = await import('../dist/config/load.js');
const { prepareData } = await import('../dist/data/prepare.js');
const { openRunData } = await import('../dist/train/data.js');
const { Trainer } = await import('../dist/train/trainer.js');

const steps = process.argv[2] ?? '20';
const root = mkdtempSync(join(tmpdir(), 'mdlm-precision-'));
const dataDir = join(root, 'data');
await prepareData({ tokenizer: 'byte', out: dataDir, valFraction: 0.02, seed: 7 });
for (const kind of ['ar', 'mdlm']) {
  const losses = {};
  for (const precision of ['f32', 'bf16']) {
    const config = resolveConfig({ preset: 'tiny', overrides: {
      'model.dModel': '64', 'model.nLayers': '2', 'model.nHeads': '4', 'model.ffnHidden': '192', 'model.seqLen': '64', 'model.initStd': '0.08',
      'train.batchSize': '8', 'train.steps': steps, 'train.lr': '1e-2', 'train.minLr': '1e-3', 'train.warmupSteps': '5', 'train.evalEvery': '0',
      'train.evalBatches': '1', 'train.saveEvery': '0', 'train.precision': precision, 'objective.kind': kind, 'data.path': dataDir, out: join(root, kind + precision), backend: 'cpu',
    } });
    const data = await openRunData(config, () => {});
    const t = new Trainer({ config, backend: new CpuBackend(), train: data.train, val: data.val, tokenizer: data.tokenizer, resume: false, log: () => {} });
    losses[precision] = (await t.run()).losses;
    t.destroy();
  }
  const rel = losses.f32.map((l, i) => Math.abs(losses.bf16[i] - l) / l);
  console.log(`${kind}: ${steps} steps, first loss ${losses.f32[0].toFixed(4)} (f32) ${losses.bf16[0].toFixed(4)} (bf16), last ${losses.f32.at(-1).toFixed(4)} / ${losses.bf16.at(-1).toFixed(4)}; max relative difference ${Math.max(...rel).toExponential(2)}`);
}
rmSync(root, { recursive: true, force: true });
