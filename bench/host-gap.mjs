#!/usr/bin/env node
// How long a training step waits for the host: times rounds of `steps` optimizer steps as training
// runs them (src/train/trainer.ts optimizerStep: one read-back of the loss and the gradient norm
// at the end of each), then as many steps queued with no read-back at all (queueStep: prepare,
// forward and backward, gradient norm, AdamW), ended by one sync. The difference is what a deeper queue (the
// next step queued before the last one's metrics are read) could win.
// Usage (after npx tsc): node bench/host-gap.mjs [preset] [ar|mdlm] [steps] [backend]
//   defaults: llama-124m mdlm 20 cuda
import { benchConfig, syntheticBatches } from '../dist/bench/train.js';
import { LlamaModel } from '../dist/model/llama.js';
import { AdamW } from '../dist/optim/adamw.js';
import { createBackend } from '../dist/runtime/backends.js';
import { Lookahead, computeDtype, createObjective, optimizerStep, queueStep } from '../dist/train/trainer.js';

const [preset = 'llama-124m', objectiveKind = 'mdlm', stepsArg = '20', backendName = 'cuda'] = process.argv.slice(2);
const steps = Number(stepsArg);
if (!['ar', 'mdlm'].includes(objectiveKind) || !(steps > 0)) {
  console.error('usage: node bench/host-gap.mjs [preset] [ar|mdlm] [steps] [backend]');
  process.exit(2);
}
const cfg = benchConfig({ preset, objective: objectiveKind, backend: backendName, steps, warmup: 3, precision: 'auto' });
const backend = await createBackend(backendName);
const t = cfg.train;
const maskId = cfg.objective.maskTokenId ?? cfg.model.vocabSize - 1;
const model = new LlamaModel(backend, cfg.model, t.batchSize, t.seed, {
  dtype: computeDtype(t.precision, backend), record: t.cudaGraphs && backend.name === 'cuda', recompute: t.recompute, logitChunks: t.logitChunks,
});
const objective = createObjective(cfg.objective, t.seed, maskId);
const optimizer = new AdamW(model.store, { beta1: t.beta1, beta2: t.beta2, eps: t.adamEps, weightDecay: t.weightDecay, gradClip: t.gradClip });
const batches = new Lookahead(syntheticBatches(t.batchSize, cfg.model.seqLen, maskId, t.seed), () => undefined);
const parts = { model, objective, optimizer };
let step = 0;
for (let i = 0; i < 3; i++) await optimizerStep(parts, batches, step++, 1, t.lr, 'skip');
await backend.sync();
for (let round = 0; round < 3; round++) {
  let started = performance.now();
  for (let i = 0; i < steps; i++) await optimizerStep(parts, batches, step++, 1, t.lr, 'skip');
  await backend.sync();
  const readBack = (performance.now() - started) / steps;
  started = performance.now();
  for (let i = 0; i < steps; i++) await queueStep(parts, batches, step++, 1, t.lr);
  await backend.sync();
  const queued = (performance.now() - started) / steps;
  console.log(`${preset} ${objectiveKind} round ${round + 1}: ${readBack.toFixed(3)} ms a step with one read-back, ${queued.toFixed(3)} ms queued, difference ${(readBack - queued).toFixed(3)} ms`);
}
backend.destroy();
