/** The distributed optimizer's pieces in one process: the flat buffer's shards, AdamW over a shard, the per-rank memory estimate. */
import { describe, expect, it } from 'vitest';
import { CpuBackend } from '../../src/backend/cpu/cpu.js';
import { resolveConfig } from '../../src/config/load.js';
import { SOLO } from '../../src/dist/collectives.js';
import { globalNorm } from '../../src/dist/zero.js';
import { LlamaModel } from '../../src/model/llama.js';
import { PARAM_ALIGN, flatShard } from '../../src/nn/params.js';
import { AdamW, chunksIn, updateChunks } from '../../src/optim/adamw.js';
import { trainingMemory } from '../../src/train/memory.js';

const cfg = resolveConfig({ preset: 'tiny', overrides: { 'model.dModel': '64', 'model.nLayers': '2', 'model.nHeads': '4', 'model.ffnHidden': '96', 'model.seqLen': '24' } });
const opts = { beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1, gradClip: 1 };

describe('flatShard', () => {
  it('splits a flat buffer into contiguous aligned ranges in rank order, covering it once', () => {
    for (const [total, W] of [[64 * 10, 3], [64 * 7, 2], [64 * 8, 8], [64 * 1000, 7]] as const) {
      const shards = Array.from({ length: W }, (_, r) => flatShard(total, W, r));
      let at = 0;
      for (const s of shards) {
        expect(s.offset).toBe(at);
        expect(s.offset % PARAM_ALIGN).toBe(0);
        expect(s.stride % PARAM_ALIGN).toBe(0);
        expect(s.size).toBeGreaterThan(0);
        expect(s.size).toBeLessThanOrEqual(s.stride);
        at += s.size;
      }
      expect(at).toBe(total);
    }
  });

  it('refuses a rank left without a shard', () => {
    expect(() => flatShard(64 * 2, 3, 2)).toThrow(/leave rank 2 of 3 no shard/);
  });
});

describe('AdamW over a shard', () => {
  it("keeps moments for its shard only and updates that range alone, to the whole buffer's values there", async () => {
    const b = new CpuBackend();
    const whole = new LlamaModel(b, cfg.model, 2, 1, { dtype: 'f32' });
    const part = new LlamaModel(b, cfg.model, 2, 1, { dtype: 'f32' });
    const total = whole.store.value.size;
    const shard = flatShard(total, 3, 1);
    const { offset, size } = shard;
    const before = Array.from((await b.download(part.store.value)) as Float32Array);
    const grad = Float32Array.from({ length: total }, (_, i) => Math.sin(i));
    for (const m of [whole, part]) b.upload(m.store.grad, grad);
    const full = new AdamW(whole.store, opts);
    const sharded = new AdamW(part.store, { ...opts, shard });
    expect([sharded.m.size, sharded.v.size]).toEqual([size, size]);
    // Every element of the shard is in exactly one chunk.
    expect(chunksIn(updateChunks(part.store, opts.weightDecay), shard).reduce((n, c) => n + c.size, 0)).toBe(size);
    // One clip coefficient for both (the sharded one's comes from globalNorm).
    for (const o of [full, sharded]) b.upload(o.normOut, Float32Array.of(0, 1));
    full.update(1e-2, 1);
    sharded.update(1e-2, 1);
    const w = Array.from((await b.download(whole.store.value)) as Float32Array);
    const p = Array.from((await b.download(part.store.value)) as Float32Array);
    expect(p.slice(offset, offset + size)).toEqual(w.slice(offset, offset + size));
    expect(Array.from((await b.download(sharded.m)) as Float32Array)).toEqual(Array.from((await b.download(full.m)) as Float32Array).slice(offset, offset + size));
    // Outside the shard the values are as they were (the all-gather brings them), where the whole update moved them.
    expect([...p.slice(0, offset), ...p.slice(offset + size)]).toEqual([...before.slice(0, offset), ...before.slice(offset + size)]);
    expect(w.slice(0, offset)).not.toEqual(before.slice(0, offset));
  });

  it('globalNorm: alone, the shard norm is the norm, clipped by grad_norm\'s formula times the gradient scale', async () => {
    const b = new CpuBackend();
    const out = b.alloc([2], 'f32');
    b.upload(out, Float32Array.of(4, 0));
    await globalNorm(SOLO, b, out, 1, 0.5);
    const [norm, clip] = (await b.download(out)) as Float32Array;
    expect(norm).toBe(4);
    expect(clip).toBe(Math.fround(0.5 * (1 / (4 + 1e-6))));
  });
});

describe('the per-rank memory estimate under train.zero 1', () => {
  for (const dtype of ['f32', 'bf16'] as const) {
    it(`counts rank 0's shard (the largest) of the AdamW moments${dtype === 'bf16' ? ' and of the f32 masters' : ''}, as a sharded model and AdamW allocate: ${dtype}`, () => {
      for (const W of [2, 4]) {
        const b = new CpuBackend();
        const model = new LlamaModel(b, cfg.model, 3, 1, { dtype, masterRanks: { worldSize: W, rank: 0 } });
        const total = model.store.size;
        const shard = flatShard(total, W, 0);
        const opt = new AdamW(model.store, { ...opts, shard });
        const est = trainingMemory(cfg.model, 3, dtype, {}, W);
        const plain = trainingMemory(cfg.model, 3, dtype);
        expect(est.optimizer).toBe([opt.m, opt.v, opt.normOut, opt.schedule, opt.gradScale].reduce((n, t) => n + t.byteSize, 0));
        expect(est.weights).toBe(model.store.value.byteSize);
        expect(est.activations).toBe(model.activationBytes);
        expect(plain.optimizer - est.optimizer).toBe(8 * (total - shard.size));
        // Under f32 the masters are the layers' weights and stay whole; under bf16 the working copy is.
        expect(plain.weights - est.weights).toBe(dtype === 'f32' ? 0 : 4 * (total - shard.size));
        expect(model.store.masterShard).toEqual(dtype === 'f32' ? { offset: 0, size: total, stride: total, total } : shard);
        // The gradients, the working copy and the activations stay whole on every rank.
        expect([est.grads, est.workingCopy, est.activations]).toEqual([plain.grads, plain.workingCopy, plain.activations]);
        model.destroy();
      }
    });
  }

  it('sharded masters: each rank keeps its range of the initial values, the working copy whole, the gradients zero; a parameter has no master view', async () => {
    const b = new CpuBackend();
    const whole = new LlamaModel(b, cfg.model, 2, 7, { dtype: 'bf16' });
    const all = (await b.download(whole.store.value)) as Float32Array;
    const work = (await b.download(whole.store.workingCopy!)) as Float32Array;
    for (const rank of [0, 1, 2]) {
      const m = new LlamaModel(b, cfg.model, 2, 7, { dtype: 'bf16', masterRanks: { worldSize: 3, rank } });
      const { offset, size } = m.store.masterShard;
      expect(Array.from((await b.download(m.store.value)) as Float32Array)).toEqual(Array.from(all.subarray(offset, offset + size)));
      expect(Array.from((await b.download(m.store.workingCopy!)) as Float32Array)).toEqual(Array.from(work));
      expect(((await b.download(m.store.grad)) as Float32Array).every((x) => x === 0)).toBe(true);
      expect(() => m.store.list[0]!.value).toThrow(/the f32 masters are sharded \(train.zero 1\)/);
      m.destroy();
    }
  });
});
