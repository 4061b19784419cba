/** The training-memory estimate (a dry run of the model's allocations) against what a model really allocates, and the setup error it feeds. */
import { describe, expect, it } from 'vitest';
import { CpuBackend } from '../src/backend/cpu/cpu.js';
import type { Backend } from '../src/backend/backend.js';
import { CudaBackend } from '../src/backend/cuda/cuda.js';
import { MdlmError } from '../src/errors.js';
import { checkTrainingFits, deviceReserve, trainingMemory, withMemoryEstimate } from '../src/train/memory.js';
import { activationSaving, recordsSteps } from '../src/train/setup.js';
import { expectMdlmError } from './support/contracts.js';
import { MODEL_VARIANTS } from './support/model_variants.js';
import { lossWeights, tokenBatch } from './support/model_batch.js';
import { simulatedCudaAddon } from './support/simulated_cuda.js';
import { hasWebGpu, webgpuBackend } from './support/webgpu.js';
import { resolveConfig } from '../src/config/load.js';
import { paramCount } from '../src/config/model-size.js';
import { LlamaModel } from '../src/model/llama.js';
import { logitChunksOf, logitRows } from '../src/model/saving.js';
import { AdamW } from '../src/optim/adamw.js';
import type { Recompute } from '../src/config/schema.js';

const smallModel = (over: Record<string, string> = {}) =>
  resolveConfig({ preset: 'tiny', overrides: { 'model.dModel': '64', 'model.nLayers': '2', 'model.nHeads': '4', 'model.ffnHidden': '96', 'model.seqLen': '24', ...over } });

describe('trainingMemory', () => {
  for (const [label, over, saving] of MODEL_VARIANTS) {
    for (const dtype of ['f32', 'bf16'] as const) {
      it(`matches what a model and its AdamW really allocate: ${label}, ${dtype}`, () => {
        const cfg = smallModel(over);
        const batch = 3;
        const b = new CpuBackend();
        const model = new LlamaModel(b, cfg.model, batch, 1, { dtype, ...saving });
        const opt = new AdamW(model.store, { beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1, gradClip: 1 });
        const est = trainingMemory(cfg.model, batch, dtype, saving);
        expect(est.activations).toBe(model.activationBytes);
        expect(est.weights).toBe(model.store.value.byteSize);
        expect(est.grads).toBe(model.store.grad.byteSize);
        expect(est.optimizer).toBe([opt.m, opt.v, opt.normOut, opt.schedule, opt.gradScale].reduce((n, t) => n + t.byteSize, 0));
        expect(model.store.list[0]!.compute.dtype).toBe(dtype);
        expect(est.workingCopy).toBe(dtype === 'f32' ? 0 : 2 * model.store.value.size);
        expect(est.fp8).toBe(model.fp8?.bytes ?? 0);
        if (saving.fp8) expect(est.fp8).toBeGreaterThan(0);
        expect(est.total).toBe(est.weights + est.grads + est.optimizer + est.workingCopy + est.activations + est.fp8);
        // Every tensor of the run is in it: the estimate's buffers, rounded as the pool rounds them, are the device's.
        const pooled = b.poolStats().liveBytes;
        expect(pooled).toBeGreaterThanOrEqual(est.total);
        expect(pooled - est.total).toBeLessThan(256 * 200);
        opt.destroy();
        model.destroy();
      });
    }
  }

  // dModel 48 · ffnHidden 10 = 480 elements, padded to 512: the gate and up weights apart, the
  // separate GEMMs, and the [N, F] dh scratch they need, which the joined MLPs never store.
  it("counts the MLP's dh scratch where its gate and up weights lie apart", () => {
    const cfg = smallModel({ 'model.dModel': '48', 'model.nHeads': '2', 'model.ffnHidden': '10' });
    const joined = smallModel({ 'model.dModel': '48', 'model.nHeads': '2', 'model.ffnHidden': '16' });
    const batch = 2, N = batch * cfg.model.seqLen;
    const model = new LlamaModel(new CpuBackend(), cfg.model, batch, 1, { dtype: 'f32' });
    expect(model.blocks[0]!.mlp.joined).toBe(false);
    const apart = trainingMemory(cfg.model, batch, 'f32');
    expect(apart.activations).toBe(model.activationBytes);
    // Per layer 3 [N, F] buffers (gate, up, product) scale with F, plus the shared [2N, F] gradient; apart adds [N, F] once.
    const perF = (3 * cfg.model.nLayers + 2) * N * 4;
    expect(trainingMemory(joined.model, batch, 'f32').activations - apart.activations).toBe(6 * perF - N * 10 * 4);
    model.destroy();
  });

  it('is a dry run: llama-7b shapes in bf16 cost no memory and no parameter values', () => {
    const cfg = resolveConfig({ preset: 'llama-1.3b', overrides: { 'model.dModel': '4096', 'model.nLayers': '32', 'model.nHeads': '32', 'model.ffnHidden': '11008', 'model.seqLen': '4096', 'model.tieEmbeddings': 'false' } });
    const started = performance.now();
    const est = trainingMemory(cfg.model, 4, 'bf16');
    expect(performance.now() - started).toBeLessThan(2000);
    const P = paramCount(cfg.model);
    expect(P).toBeGreaterThan(6.7e9);
    expect((est.weights + est.grads + est.optimizer + est.workingCopy) / P).toBeGreaterThanOrEqual(18);
    expect((est.weights + est.grads + est.optimizer + est.workingCopy) / P).toBeLessThan(18.01);
  });

  it('train.recompute swiglu: a [tokens, ffnHidden] buffer less a layer, and the same loss and gradient bits', async () => {
    const cfg = smallModel();
    const batch = 2, N = batch * cfg.model.seqLen;
    const kept = trainingMemory(cfg.model, batch, 'f32');
    const recomputed = trainingMemory(cfg.model, batch, 'f32', { recompute: 'swiglu' });
    expect(kept.activations - recomputed.activations).toBe(cfg.model.nLayers * N * cfg.model.ffnHidden * 4);
    const run = async (recompute: Recompute) => {
      const b = new CpuBackend();
      const m = new LlamaModel(b, cfg.model, batch, 5, { recompute });
      m.setBatch(tokenBatch(N, cfg.model.seqLen), true);
      m.forwardBackward();
      const out = { loss: await m.loss(), grad: (await b.download(m.store.grad)) as Float32Array };
      m.destroy();
      return out;
    };
    const [a, r] = [await run('none'), await run('swiglu')];
    expect(r.loss).toBe(a.loss);
    expect(a.grad.some((x) => x !== 0)).toBe(true);
    expect(Buffer.from(r.grad.buffer).equals(Buffer.from(a.grad.buffer))).toBe(true);
  });

  it('train.recompute full: the activations of one block instead of every block, and the same loss and gradient bits (forwardBackward, and forward() then backward())', async () => {
    const variants: Record<string, string>[] = [{}, { 'model.qkNorm': 'true', 'model.nKvHeads': '2', 'model.nLayers': '3' }, { 'model.qkvBias': 'true', 'model.tieEmbeddings': 'false' }];
    for (const over of variants) {
      const cfg = smallModel(over);
      const batch = 2, N = batch * cfg.model.seqLen, L = cfg.model.nLayers;
      for (const dtype of ['f32', 'bf16'] as const) {
        const kept = trainingMemory(cfg.model, batch, dtype);
        const full = trainingMemory(cfg.model, batch, dtype, { recompute: 'full' });
        // A block's own activations: what one more layer adds to the estimate.
        const oneMore = trainingMemory({ ...cfg.model, nLayers: L + 1 }, batch, dtype);
        const stream = N * cfg.model.dModel * (dtype === 'f32' ? 4 : 2);
        const perBlock = oneMore.activations - kept.activations - stream;
        expect(perBlock).toBeGreaterThan(0);
        expect(kept.activations - full.activations).toBe((L - 1) * perBlock);
        expect([full.weights, full.grads, full.optimizer]).toEqual([kept.weights, kept.grads, kept.optimizer]);
      }
      const run = async (recompute: Recompute, fused: boolean) => {
        const b = new CpuBackend();
        const m = new LlamaModel(b, cfg.model, batch, 5, { recompute });
        m.setBatch(tokenBatch(N, cfg.model.seqLen), true);
        if (fused) m.forwardBackward();
        else {
          m.forward();
          m.backward();
        }
        const out = { loss: await m.loss(), grad: (await b.download(m.store.grad)) as Float32Array };
        m.destroy();
        return out;
      };
      for (const fused of [true, false]) {
        const [a, r] = [await run('none', fused), await run('full', fused)];
        expect(r.loss).toBe(a.loss);
        expect(a.grad.some((x) => x !== 0)).toBe(true);
        expect(Buffer.from(r.grad.buffer).equals(Buffer.from(a.grad.buffer))).toBe(true);
      }
    }
  });

  const backends: [string, () => Promise<Backend>][] = [['cpu', async () => new CpuBackend()]];
  if (hasWebGpu) backends.push(['webgpu', async () => (await webgpuBackend())!]);
  for (const [bname, get] of backends) it(`train.logitChunks (${bname}): one block of logits held; the same losses, and gradients equal to rounding, by forwardBackward and by forward() then backward()`, async () => {
    // 3 × 48 = 144 rows: blocks of 128 and 16 rows at 2 chunks, 64, 64 and 16 at 3
    const cfg = smallModel({ 'model.seqLen': '48' });
    const batch = 3, N = batch * 48, V = cfg.model.vocabSize;
    expect([1, 2, 3, 100].map((k) => logitRows(N, k))).toEqual([144, 128, 64, 64]);
    expect(logitRows(50, 2)).toBe(50);
    const whole = trainingMemory(cfg.model, batch, 'f32');
    expect(whole.activations - trainingMemory(cfg.model, batch, 'f32', { logitChunks: 3 }).activations).toBe((N - 64) * V * 4);
    const b = await get();
    const run = async (logitChunks: number, split: boolean) => {
      const m = new LlamaModel(b, cfg.model, batch, 5, { logitChunks });
      expect(m.logitRows).toBe(logitRows(N, logitChunks));
      const targets = Int32Array.from({ length: N }, (_, i) => (i % 7 === 0 ? -1 : (i * 31 + 2) % 256));
      m.setBatch({ inputs: Int32Array.from({ length: N }, (_, i) => (i * 29 + 5) % 256), targets, segIds: new Int32Array(N), positions: Int32Array.from({ length: N }, (_, i) => i % 48), weights: Float32Array.from({ length: N }, (_, i) => 0.5 + (i % 3)) }, false);
      if (split) {
        m.forward();
        m.backward();
      } else {
        m.forwardBackward();
      }
      const out = { loss: await m.loss(), tokens: await m.tokenLosses(), grad: (await b.download(m.store.grad)) as Float32Array };
      expect(out.tokens.some((t) => t > 0)).toBe(true);
      if (logitChunks > 1) expect(() => m.forwardLogits()).toThrow(/holds the logits of \d+ of its 144 rows/);
      m.destroy();
      return out;
    };
    const ref = await run(1, false);
    const scale = Math.max(...ref.grad.map(Math.abs));
    expect(scale).toBeGreaterThan(0);
    for (const [chunks, split] of [[3, false], [3, true], [2, false]] as const) {
      const r = await run(chunks, split);
      expect(r.tokens).toEqual(ref.tokens);
      expect(r.loss).toBe(ref.loss);
      for (let i = 0; i < r.grad.length; i++) expect(Math.abs(r.grad[i]! - ref.grad[i]!), `${chunks} blocks${split ? ', split' : ''}: grad ${i}`).toBeLessThanOrEqual(1e-6 * scale);
    }
    expect(() => new LlamaModel(b, cfg.model, batch, 5, { logitChunks: 0 })).toThrow(/train.logitChunks: 0 is not a whole number >= 1/);
  });

  // Masked-diffusion-like rows: a third carry a weight (some of those an ignored target), so with
  // blocks of 64, 64 and 16 rows (8 chunks, rounded up to 64 rows) the packed rows fill the first block only.
  const packedBatch = (N: number) => ({ batch: tokenBatch(N, 48, { ignoreEvery: 11 }), weights: lossWeights(N) });
  const packedBackends: [string, () => Promise<Backend>, boolean][] = [['cpu', async () => new CpuBackend(), false], ['simulated cuda, recorded', async () => new CudaBackend(simulatedCudaAddon()), true]];
  if (hasWebGpu) packedBackends.push(['webgpu', async () => (await webgpuBackend())!, false]);
  for (const [bname, get, record] of packedBackends) it(`train.lossRows weighted (${bname}): forwardBackward over the packed rows gives the loss of every row, and gradients equal to rounding, as the same backend unpacked`, async () => {
    const cfg = smallModel({ 'model.seqLen': '48' });
    const batch = 3, N = batch * 48;
    const { batch: rows, weights } = packedBatch(N);
    const run = async (b: Backend, packLossRows: boolean, passes: number) => {
      const m = new LlamaModel(b, cfg.model, batch, 5, { packLossRows, record });
      expect(m.logitRows).toBe(packLossRows ? 64 : N);
      m.setBatch({ ...rows, weights }, false);
      const out: { loss: number; grad: Float32Array }[] = [];
      for (let p = 0; p < passes; p++) {
        m.forwardBackward(true);
        out.push({ loss: await m.loss(), grad: (await b.download(m.store.grad)) as Float32Array });
      }
      m.destroy();
      return out;
    };
    const b = await get();
    const [ref] = await run(b, false, 1);
    const scale = Math.max(...ref!.grad.map(Math.abs));
    expect(scale).toBeGreaterThan(0);
    // Recorded: a direct pass, the recording's pass, then a replay, which skips the two empty blocks.
    const passes = await run(b, true, record ? 3 : 1);
    for (const [p, r] of passes.entries()) {
      expect(Math.abs(r.loss - ref!.loss), `pass ${p}`).toBeLessThanOrEqual(1e-6 * Math.abs(ref!.loss));
      for (let i = 0; i < r.grad.length; i++) expect(Math.abs(r.grad[i]! - ref!.grad[i]!), `pass ${p}: grad ${i}`).toBeLessThanOrEqual(1e-6 * scale);
    }
  });

  it('packs the loss rows only for a sparse loss (masked diffusion), train.lossRows weighted and a backend that skips the empty blocks (CPU, WebGPU, recorded CUDA), in at least 8 blocks', () => {
    const t = smallModel().train;
    expect(t.lossRows).toBe('weighted');
    const sparse = { sparseLoss: true }, dense = { sparseLoss: false };
    const cuda = { name: 'cuda', skipsConditional: 'recorded' } as const;
    const webgpu = { name: 'webgpu', skipsConditional: 'always' } as const;
    const never = { name: 'cpu', skipsConditional: 'never' } as const;
    expect(activationSaving(t, sparse, cuda).packLossRows).toBe(true);
    expect(activationSaving({ ...t, cudaGraphs: false }, sparse, cuda).packLossRows).toBe(false);
    expect(activationSaving(t, sparse, webgpu).packLossRows).toBe(true);
    expect(activationSaving(t, sparse, never).packLossRows).toBe(false);
    expect(activationSaving(t, dense, cuda).packLossRows).toBe(false);
    expect(activationSaving({ ...t, lossRows: 'all' }, sparse, webgpu).packLossRows).toBe(false);
    expect(recordsSteps(t, { name: 'cuda' })).toBe(true);
    expect(recordsSteps(t, { name: 'webgpu' })).toBe(false);
    expect(recordsSteps({ ...t, cudaGraphs: false }, { name: 'cuda' })).toBe(false);
    expect(logitChunksOf({ logitChunks: 2, packLossRows: true })).toBe(8);
    expect(logitChunksOf({ logitChunks: 12, packLossRows: true })).toBe(12);
    expect(logitChunksOf({ logitChunks: 2 })).toBe(2);
  });

  it('train.lossRows weighted skips the recorded blocks past the packed rows, and runs them when rows reach them', async () => {
    const cfg = smallModel({ 'model.seqLen': '48' });
    const batch = 3, N = batch * 48;
    const addon = simulatedCudaAddon();
    const b = new CudaBackend(addon);
    const m = new LlamaModel(b, cfg.model, batch, 5, { packLossRows: true, record: true });
    const { batch: rows, weights } = packedBatch(N);
    // Blocks of 64, 64 and 16 rows; block i > 0 runs when more than 64·i rows are packed.
    const all = new Float32Array(N).fill(1);
    // 71 and 72 rows less 7 ignored targets: exactly one block's 64 packed rows, then one more.
    const first = (n: number) => weights.map((_, i) => (i < n ? 1 : 0));
    const skipsSeen: number[] = [];
    for (const w of [weights, all, weights.map((x, i) => (i < 100 ? 1 : x)), first(71), first(72)]) {
      const packed = w.filter((x, i) => x !== 0 && rows.targets[i]! >= 0).length;
      const skips = [64, 128].filter((start) => packed <= start).length;
      skipsSeen.push(skips);
      m.setBatch({ ...rows, weights: w }, false);
      const before = addon.skippedBodies();
      for (let p = 0; p < 3; p++) m.forwardBackward(true);
      const ref = new LlamaModel(new CudaBackend(simulatedCudaAddon()), cfg.model, batch, 5);
      ref.setBatch({ ...rows, weights: w }, false);
      ref.forwardBackward(true);
      expect(Math.abs((await m.loss()) - (await ref.loss()))).toBeLessThanOrEqual(1e-6 * Math.abs(await ref.loss()));
      ref.destroy();
      // The first weights run directly, then record and replay, then replay; the others replay thrice.
      expect(addon.skippedBodies() - before, `${packed} packed rows`).toBe(skips * (w === weights ? 2 : 3));
    }
    expect(skipsSeen).toEqual([2, 0, 1, 2, 1]);
    m.destroy();
  });

  it("keeps the llama-1.3b preset at its micro-batch (8 × 2048, bf16) below PyTorch's measured peak, without recomputing", () => {
    const cfg = resolveConfig({ preset: 'llama-1.3b' });
    expect(cfg.train.logitChunks).toBe(2);
    const est = trainingMemory(cfg.model, cfg.train.batchSize, 'bf16', { recompute: cfg.train.recompute, logitChunks: cfg.train.logitChunks });
    // 48.96 GiB: torch.compile's measured peak for the same model and batch. Unchunked, the
    // logits would leave less than 0.2 GiB of margin.
    expect(est.total / 2 ** 30).toBeLessThan(48.96);
    expect(trainingMemory(cfg.model, cfg.train.batchSize, 'bf16').total / 2 ** 30).toBeGreaterThan(48.96 - 0.2);
  });

  it('fits the llama-3b preset (every block recomputed) at 4 × 2048 in bf16 on one 80 GB GPU, with the device reserve', () => {
    const cfg = resolveConfig({ preset: 'llama-3b' });
    expect(cfg.model).toMatchObject({ dModel: 3072, nLayers: 28, nHeads: 24, nKvHeads: 8, ffnHidden: 8192, vocabSize: 50304 });
    expect(paramCount(cfg.model)).toBeGreaterThan(2.9e9);
    expect(paramCount(cfg.model)).toBeLessThan(3.1e9);
    expect([cfg.train.batchSize, cfg.model.seqLen, cfg.train.recompute]).toEqual([4, 2048, 'full']);
    const est = trainingMemory(cfg.model, 4, 'bf16', { recompute: cfg.train.recompute, logitChunks: cfg.train.logitChunks });
    const device = 80e9;
    // 53.3 GiB: 44 GiB of f32 weights, gradients and AdamW state, 5.5 of bf16 working copy, 3.4 of activations.
    expect(est.total + deviceReserve(device)).toBeLessThan(device - 15 * 2 ** 30);
    expect(trainingMemory(cfg.model, 4, 'bf16').activations).toBeGreaterThan(5 * est.activations);
  });

  it('a 7B model (Llama-2 shapes, 1 × 4096, every block recomputed) under train.zero 1 over 8 ranks: an eighth of the AdamW state and f32 masters a rank, fitting 80 GB', () => {
    const cfg = resolveConfig({ preset: 'llama-1.3b', overrides: { 'model.dModel': '4096', 'model.nLayers': '32', 'model.nHeads': '32', 'model.ffnHidden': '11008', 'model.seqLen': '4096', 'model.tieEmbeddings': 'false' } });
    const saving = { recompute: 'full', logitChunks: 4 } as const;
    const one = trainingMemory(cfg.model, 1, 'bf16', saving);
    const rank = trainingMemory(cfg.model, 1, 'bf16', saving, 8);
    expect(rank.optimizer).toBeLessThan(one.optimizer / 8 + 2 ** 20);
    expect(rank.weights).toBeLessThan(one.weights / 8 + 2 ** 20);
    // 50.2 GiB a rank (117.6 unsharded): the f32 gradients (25.7 GiB) and the bf16 working copy
    // (12.8 GiB) stay whole on every rank under train.zero 1.
    const device = 80e9;
    expect(rank.total + deviceReserve(device)).toBeLessThan(device);
    expect(one.total).toBeGreaterThan(device);
  });

  it('keeps llama-124m (16 × 1024) and llama-1.3b (8 × 2048) in FP8 within their bf16 budgets: the FP8 blocks keep Q(xᵀ) of the norm outputs and the SwiGLU product instead of the bf16 tensors', () => {
    const fp8 = { scaling: 'delayed', historyLen: 16, margin: 0, keepFirst: 0, keepLast: 0 } as const;
    for (const [preset, batch] of [['llama-124m', 16], ['llama-1.3b', 8]] as const) {
      const cfg = resolveConfig({ preset });
      const saving = { recompute: cfg.train.recompute, logitChunks: cfg.train.logitChunks };
      const bf16 = trainingMemory(cfg.model, batch, 'bf16', saving);
      const inFp8 = trainingMemory(cfg.model, batch, 'bf16', { ...saving, fp8 });
      const { dModel: d, ffnHidden: F, nLayers: L } = cfg.model;
      const tokens = batch * cfg.model.seqLen;
      // Per block and token the two norm outputs (2 · d in bf16) and the product (F in bf16) are
      // not kept: one shared set of the norm outputs and the product's gradient dh (F in bf16) are
      // scratch instead, and their FP8 transposes (2 · d + F bytes a block and token) are kept.
      expect(bf16.activations - inFp8.activations).toBe((L - 1) * tokens * 2 * (2 * d + F));
      expect(inFp8.fp8).toBeGreaterThanOrEqual(L * tokens * (2 * d + F));
      expect(inFp8.total).toBeLessThan(bf16.total);
    }
  });

  it('charges llama-1.3b in bf16 18 bytes a parameter (f32 weights, gradients, two moments; bf16 copy) within the padding', () => {
    const cfg = resolveConfig({ preset: 'llama-1.3b' });
    const est = trainingMemory(cfg.model, 8, 'bf16');
    const P = paramCount(cfg.model);
    // 16 bytes a parameter of f32 state + 2 of working copy, within the padding.
    const state = est.weights + est.grads + est.optimizer + est.workingCopy;
    expect(est.grads).toBe(est.weights);
    expect(est.optimizer).toBe(2 * est.weights + 4 * 6); // the two moments, then the norm, the schedule and the gradient scale
    expect(state / P).toBeGreaterThanOrEqual(18);
    expect(state / P).toBeLessThan(18.01);
  });
});

describe('out of memory at setup', () => {
  it('refuses up front a run the device cannot hold, with the estimate and what to change', async () => {
    const b = new CudaBackend(simulatedCudaAddon()); // 1 GiB
    const cfg = resolveConfig({ preset: 'llama-124m' });
    await expectMdlmError(() => checkTrainingFits(b, cfg.model, 16, 'bf16'), 'OUT_OF_MEMORY', 'needs about 8.50 GiB: weights 471.4 MiB', 'activations 6.43 GiB', 'has 1.00 GiB', 'lower train.batchSize');
    const small = resolveConfig({ preset: 'tiny' });
    expect(checkTrainingFits(b, small.model, 2, 'bf16').total).toBeLessThan(2 ** 30);
    // No known memory (the CPU): nothing to check against.
    expect(checkTrainingFits(new CpuBackend(), cfg.model, 16, 'bf16').total).toBeGreaterThan(2 ** 30);
  });

  it('adds the estimate to an allocation that fails during setup', async () => {
    const est = trainingMemory(resolveConfig({ preset: 'tiny' }).model, 2, 'f32');
    const failing = () => withMemoryEstimate(est, () => { throw new MdlmError('OUT_OF_MEMORY', 'cuda: cannot allocate 64 MiB for a tensor (10 MiB free of 1 GiB)'); });
    await expectMdlmError(failing, 'OUT_OF_MEMORY', 'cannot allocate 64 MiB', 'This run needs about', 'activations');
    expect(() => withMemoryEstimate(est, () => { throw new MdlmError('BAD_SHAPE', 'x'); })).toThrow(/^x$/);
  });
});
