import { describe, expect, it } from 'vitest';
import { CudaBackend } from '../src/backend/cuda/cuda.js';
import { type Access, type ByteRange, SideStreamHazards, conflicts } from '../src/backend/cuda/side_stream.js';
import { resolveConfig } from '../src/config/load.js';
import type { ActivationSaving } from '../src/config/model-size.js';
import { LlamaModel } from '../src/model/llama.js';
import { benchConfig, benchSetup, benchTrainMdlm, describeThroughput } from '../src/bench/train.js';
import { deferredSteps } from './support/deferred_steps.js';
import { MODEL_VARIANTS } from './support/model_variants.js';
import { lossWeights, tokenBatch } from './support/model_batch.js';
import { simulatedCudaAddon } from './support/simulated_cuda.js';

const r = (start: number, end: number): ByteRange => [BigInt(start), BigInt(end)];
const access = (reads: ByteRange[], writes: ByteRange[]): Access => ({ reads, writes });

describe('SideStreamHazards', () => {
  it('a later main-stream op conflicts with a side op when it writes what that op reads or touches what it writes', () => {
    const side = access([r(0, 100)], [r(200, 300)]);
    expect(conflicts(side, access([r(0, 100)], []))).toBe(false); // both read
    expect(conflicts(side, access([], [r(50, 60)]))).toBe(true); // overwrites its input
    expect(conflicts(side, access([r(299, 400)], []))).toBe(true); // reads its output
    expect(conflicts(side, access([], [r(250, 251)]))).toBe(true); // writes its output
    expect(conflicts(side, access([r(100, 200)], [r(300, 400)]))).toBe(false); // touching ends only
  });

  it('waits for the newest conflicting side op, forgets it and those before it, keeps those after', () => {
    const h = new SideStreamHazards();
    h.add(access([r(0, 10)], [r(100, 110)]), 7);
    h.add(access([r(20, 30)], [r(120, 130)]), 8);
    h.add(access([r(40, 50)], [r(140, 150)]), 9);
    expect(h.waitBefore(access([r(0, 10)], [r(500, 600)]))).toBeNull();
    expect(h.size).toBe(3);
    // Conflicts with the second only: waiting for it covers the first as well.
    expect(h.waitBefore(access([r(125, 126)], []))).toBe(8);
    expect(h.size).toBe(1);
    expect(h.waitBefore(access([], [r(0, 10)]))).toBeNull(); // the first is no longer pending
    expect(h.waitAll()).toBe(9);
    expect(h.size).toBe(0);
    expect(h.waitAll()).toBeNull();
  });
});


describe('weight gradients on the side stream (simulated CUDA, side ops run as late as the joins allow)', () => {
  const cfgOf = (over: Record<string, string>) =>
    resolveConfig({ preset: 'tiny', overrides: { 'model.dModel': '64', 'model.nLayers': '2', 'model.nHeads': '4', 'model.ffnHidden': '96', 'model.seqLen': '48', ...over } }).model;
  const batch = 3, N = batch * 48;
  const rows = tokenBatch(N, 48, { secondDoc: 30, ignoreEvery: 11 });
  const weights = lossWeights(N);

  /**
   * `steps` training steps of `accum` passes each (the first overwriting the gradients), each step's
   * AdamW deferred into the next step's first pass as the Trainer does: every pass's loss and
   * gradients, and the parameters after the last update.
   */
  const train = async (addon: ReturnType<typeof simulatedCudaAddon>, opts: { over?: Record<string, string>; saving?: ActivationSaving; steps?: number; accum?: number } = {}) => {
    const { over = {}, saving = {}, steps = 4, accum = 1 } = opts;
    const b = new CudaBackend(addon);
    const m = new LlamaModel(b, cfgOf(over), batch, 5, { dtype: 'bf16', record: true, ...saving });
    m.setBatch(rows, false);
    m.setWeights(weights);
    const { passes, params } = await deferredSteps(m, { steps, accum, lr: 5e-3 });
    m.destroy();
    return { losses: passes.map((p) => p.loss), grads: passes.map((p) => p.grad), params };
  };

  // Four steps of two passes: each setting (the first pass with the update, the first without it,
  // the accumulating pass) runs directly, then is recorded, then replayed.
  for (const [label, over, saving] of MODEL_VARIANTS) {
    it(`gives the same losses, gradients and parameters, to the bit, as one stream: ${label}`, async () => {
      const one = await train(simulatedCudaAddon(), { over, saving, accum: 2 });
      const side = simulatedCudaAddon({ sideStream: true });
      const two = await train(side, { over, saving, accum: 2 });
      expect(side.sideOps()).toBeGreaterThan(0);
      expect(two.losses).toEqual(one.losses);
      for (const [p, grad] of two.grads.entries()) expect(grad, `pass ${p}`).toEqual(one.grads[p]);
      expect(two.params).toEqual(one.params);
    });
  }

  it('would not without its joins: the side ops run at the graph end then, after what overwrites their inputs', async () => {
    const one = await train(simulatedCudaAddon(), { accum: 2 });
    const unjoined = await train(simulatedCudaAddon({ sideStream: true, ignoreJoins: true }), { accum: 2 });
    // The first three passes run unrecorded (no side stream); the replays differ.
    expect(unjoined.grads[0]).toEqual(one.grads[0]);
    expect(unjoined.grads[7]).not.toEqual(one.grads[7]);
  });

  it('a deferred AdamW update recorded aside into the next pass: the losses and parameters of one stream, and not without its joins', async () => {
    const one = await train(simulatedCudaAddon());
    const side = simulatedCudaAddon({ sideStream: true });
    const two = await train(side);
    expect(side.sideOps()).toBeGreaterThan(0);
    expect(two.losses).toEqual(one.losses);
    expect(two.params).toEqual(one.params);
    // The update changed something between the passes.
    expect(new Set(one.losses).size).toBe(4);
    const unjoined = await train(simulatedCudaAddon({ sideStream: true, ignoreJoins: true }));
    expect(unjoined.losses.slice(0, 2)).toEqual(one.losses.slice(0, 2));
    expect(unjoined.losses[3]).not.toEqual(one.losses[3]);
  });

  it('the recorded forward waits for the update chunk by chunk: the embedding for the first two, each layer for its own', async () => {
    const side = simulatedCudaAddon({ sideStream: true });
    await train(side);
    const g = side.lastGraph();
    const asideOps = g.flatMap((s) => ('side' in s ? [s] : []));
    // The update's chunks (the norms, the embedding, two layers) come first on the side stream.
    expect(asideOps.slice(0, 5).map((s) => s.side)).toEqual(['adamw_cast', 'adamw_cast', 'adamw_cast', 'adamw_cast', 'matmul']);
    const first = asideOps[0]!.event;
    const joins = g.flatMap((s, at) => ('join' in s && s.join < first + 4 ? [{ chunk: s.join - first, at }] : []));
    expect(joins.map((j) => j.chunk)).toEqual([1, 2, 3]);
    // The forward runs between them: the embedding and layer 0's norm before layer 0's chunk, and
    // layer 0's whole forward while layer 1's chunk may still run.
    const mainOps = (from: number, to: number) => g.slice(from, to).filter((s) => 'main' in s).length;
    expect(mainOps(0, joins[0]!.at)).toBe(0);
    expect(mainOps(joins[0]!.at, joins[1]!.at)).toBe(2);
    expect(mainOps(joins[1]!.at, joins[2]!.at)).toBeGreaterThan(5);
  });

  it('MDLM_CUDA_SIDE_STREAM=gradients or update sends one kind aside, the other to the main stream, with the same results', async () => {
    const one = await train(simulatedCudaAddon());
    const sideOf = async (knob: string | undefined) => {
      const before = process.env.MDLM_CUDA_SIDE_STREAM;
      if (knob === undefined) delete process.env.MDLM_CUDA_SIDE_STREAM;
      else process.env.MDLM_CUDA_SIDE_STREAM = knob;
      try {
        const addon = simulatedCudaAddon({ sideStream: true });
        const r = await train(addon);
        expect(r.params).toEqual(one.params);
        return [...new Set(addon.lastGraph().flatMap((s) => ('side' in s ? [s.side] : [])))].sort();
      } finally {
        if (before === undefined) delete process.env.MDLM_CUDA_SIDE_STREAM;
        else process.env.MDLM_CUDA_SIDE_STREAM = before;
      }
    };
    expect(await sideOf('update')).toEqual(['adamw_cast']);
    expect(await sideOf('gradients')).toEqual(['matmul']);
    expect(await sideOf('1')).toEqual(['adamw_cast', 'matmul']);
    expect(await sideOf(undefined)).toEqual(['adamw_cast', 'matmul']);
  });

  it('runs nothing aside outside a recording, nor with the side stream off', async () => {
    for (const [addon, record] of [[simulatedCudaAddon({ sideStream: true }), false], [simulatedCudaAddon(), true]] as const) {
      const b = new CudaBackend(addon);
      const m = new LlamaModel(b, cfgOf({}), batch, 5, { dtype: 'bf16', record });
      m.setBatch(rows, false);
      for (let p = 0; p < 3; p++) m.forwardBackward(true);
      await b.sync();
      expect(addon.sideOps()).toBe(0);
      m.destroy();
    }
  });

  it('bench train reports how many ops its recorded pass put on the side stream, and nothing without one', async () => {
    for (const side of [true, false]) {
      const b = new CudaBackend(simulatedCudaAddon({ sideStream: side }));
      const overrides = { 'model.dModel': '64', 'model.nLayers': '2', 'model.nHeads': '4', 'model.ffnHidden': '96', 'model.vocabSize': '264' };
      const cfg = benchConfig({ preset: 'tiny', objective: 'ar', backend: 'cuda', batch: 2, seqLen: 32, steps: 2, warmup: 2, precision: 'bf16', overrides });
      const r = await benchTrainMdlm(cfg, benchSetup(cfg, 'tiny', undefined, b), b, 2, 2);
      b.destroy();
      // Two layers' four weight gradients, the head's, and the deferred AdamW update's four chunks
      // (the norms, the embedding, each layer).
      expect(r.ops_aside).toBe(side ? 13 : undefined);
      expect(describeThroughput(r).includes('ops recorded on the side stream')).toBe(side);
    }
  });
});
