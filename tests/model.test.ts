/**
 * The whole model's explicit backward against finite differences of its loss (CPU backend, f32
 * storage: a 1e-2 step gives ~1e-3 relative accuracy on gradients of this size), causal and
 * bidirectional, with packed documents; and its parameters against the checkpoint mapping.
 */
import { describe, expect, it } from 'vitest';
import { CpuBackend } from '../src/backend/cpu/cpu.js';
import { paramSpecs } from '../src/checkpoint/hf.js';
import { resolveConfig } from '../src/config/load.js';
import { LlamaModel } from '../src/model/llama.js';
import { modelLogits } from '../src/model/logits.js';

const cfg = resolveConfig({
  preset: 'tiny',
  overrides: { 'model.dModel': '32', 'model.nLayers': '2', 'model.nHeads': '4', 'model.nKvHeads': '2', 'model.ffnHidden': '64', 'model.seqLen': '8', 'train.steps': '1', 'train.warmupSteps': '0' },
});

describe('LlamaModel', () => {
  it('declares exactly the parameters of the checkpoint mapping, in shape', () => {
    const m = new LlamaModel(new CpuBackend(), cfg.model, 1, 1);
    expect(m.store.list.map((p) => [p.name, [...p.shape]])).toEqual(paramSpecs(cfg.model).map((s) => [s.name, s.shape]));
    m.destroy();
  });

  for (const causal of [true, false]) {
    it(`backward matches finite differences of the loss (${causal ? 'causal' : 'bidirectional'}, GQA, two documents per row)`, async () => {
      const b = new CpuBackend();
      const B = 2, T = 8, N = B * T;
      const m = new LlamaModel(b, cfg.model, B, 3);
      const inputs = Int32Array.from({ length: N }, (_, i) => (i * 37 + 11) % 256);
      const targets = Int32Array.from({ length: N }, (_, i) => (i % 5 === 0 ? -1 : (i * 53 + 7) % 256));
      const segIds = Int32Array.from({ length: N }, (_, i) => (i % T < 3 ? 0 : 1));
      const positions = Int32Array.from({ length: N }, (_, i) => (i % T < 3 ? i % T : (i % T) - 3));
      m.setBatch({ inputs, targets, segIds, positions }, causal);
      m.setWeights(Float32Array.from({ length: N }, (_, i) => 0.5 + (i % 3)));
      m.store.zeroGrads();
      m.forward();
      m.backward();
      const grad = (await b.download(m.store.grad)) as Float32Array;
      const vals = (await b.download(m.store.value)) as Float32Array;
      const an: number[] = [];
      const fd: number[] = [];
      for (const p of m.store.list) {
        // The largest-magnitude entry of each parameter: well above the f32 noise floor.
        let best = p.offset;
        for (let i = p.offset; i < p.offset + p.value.size; i++) if (Math.abs(grad[i]!) > Math.abs(grad[best]!)) best = i;
        const h = 1e-2;
        const v = vals.slice();
        v[best] = vals[best]! + h;
        b.upload(m.store.value, v);
        m.forward();
        const lp = await m.loss();
        v[best] = vals[best]! - h;
        b.upload(m.store.value, v);
        m.forward();
        const lm = await m.loss();
        an.push(grad[best]!);
        fd.push((lp - lm) / (2 * h));
      }
      b.upload(m.store.value, vals);
      for (let i = 0; i < an.length; i++) {
        expect(Math.abs(an[i]! - fd[i]!), `${m.store.list[i]!.name}: analytic ${an[i]} vs numeric ${fd[i]}`).toBeLessThan(0.03 * Math.abs(fd[i]!) + 2e-5);
      }
      m.destroy();
    });
  }

  for (const causal of [true, false]) {
    it(`modelLogits: short rows padded into the model get the logits of the unpadded rows (${causal ? 'causal' : 'bidirectional'})`, async () => {
      const b = new CpuBackend();
      const big = new LlamaModel(b, cfg.model, 2, 5); // seqLen 8, room for 2 rows
      const params = await b.download(big.store.value);
      const len = 5;
      const tokens = Int32Array.from({ length: 2 * len }, (_, i) => (i * 41 + 3) % 256);
      const padded = await modelLogits(big, causal)(tokens, 2, len);
      const exact = new LlamaModel(b, { ...cfg.model, seqLen: len }, 2, 5);
      b.upload(exact.store.value, params);
      const direct = await modelLogits(exact, causal)(tokens, 2, len);
      expect(padded.length).toBe(2 * len * cfg.model.vocabSize);
      for (let i = 0; i < direct.length; i++) expect(padded[i]).toBeCloseTo(direct[i]!, 5);
      // One row only: the second model row is all padding and changes nothing.
      const one = await modelLogits(big, causal)(tokens.subarray(0, len), 1, len);
      expect(one).toEqual(padded.subarray(0, len * cfg.model.vocabSize));
      big.destroy();
      exact.destroy();
    });
  }
});
