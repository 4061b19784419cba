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
import { Arena } from '../src/nn/arena.js';
import { AttentionScratch, SelfAttention } from '../src/nn/attention.js';
import { ParamStore } from '../src/nn/params.js';
import { PhiloxStream, RngPurpose } from '../src/rng/philox.js';

const cfg = resolveConfig({
  preset: 'tiny',
  overrides: { 'model.dModel': '32', 'model.nLayers': '2', 'model.nHeads': '4', 'model.nKvHeads': '2', 'model.ffnHidden': '64', 'model.seqLen': '8', 'train.steps': '1', 'train.warmupSteps': '0' },
});

/** Qwen2's q/k/v biases and Qwen3's per-head q/k norms, both on (no HF architecture has both; the model does). */
const qwenish = { ...cfg.model, qkvBias: true, qkNorm: true };
/** q, k and v parts of PARAM_ALIGN multiples (8 · 16 and 4 · 16): their projections take one GEMM. */
const fusedQkv = { ...cfg.model, dModel: 128, nHeads: 8, nKvHeads: 4 };

/** Biases and norm weights away from their zeros/ones initialisation, so they change the output. */
async function randomizeBiasesAndNorms(m: LlamaModel, seed: number): Promise<void> {
  const rng = new PhiloxStream(seed, RngPurpose.harness);
  const v = (await m.backend.download(m.store.value)) as Float32Array;
  for (const p of m.store.list) {
    if (!/\.b[qkv]$|_norm$/.test(p.name)) continue;
    for (let i = p.offset; i < p.offset + p.value.size; i++) v[i] = p.name.endsWith('_norm') ? 1 + 0.3 * rng.normal() : 0.5 * rng.normal();
  }
  m.backend.upload(m.store.value, v);
}

describe('LlamaModel', () => {
  it('declares exactly the parameters of the checkpoint mapping, in shape (plain, q/k/v biases, q/k norms)', () => {
    for (const model of [cfg.model, { ...cfg.model, qkvBias: true }, { ...cfg.model, qkNorm: true }]) {
      const m = new LlamaModel(new CpuBackend(), model, 1, 1);
      expect(m.store.list.map((p) => [p.name, [...p.shape]])).toEqual(paramSpecs(model).map((s) => [s.name, s.shape]));
      m.destroy();
    }
  });

  it('q/k norms make the output independent of the scale of Wq and Wk', async () => {
    const b = new CpuBackend();
    const loss = async (model: typeof cfg.model, scale: number) => {
      const m = new LlamaModel(b, model, 1, 9);
      await randomizeBiasesAndNorms(m, 2);
      const v = (await b.download(m.store.value)) as Float32Array;
      for (const p of m.store.list) if (/attn\.w[qk]$/.test(p.name)) for (let i = p.offset; i < p.offset + p.value.size; i++) v[i]! *= scale;
      b.upload(m.store.value, v);
      const N = 8;
      m.setBatch({ inputs: Int32Array.from({ length: N }, (_, i) => (i * 29 + 5) % 256), targets: Int32Array.from({ length: N }, (_, i) => (i * 31 + 2) % 256), segIds: new Int32Array(N), positions: Int32Array.from({ length: N }, (_, i) => i) }, true);
      m.forward();
      const l = await m.loss();
      m.destroy();
      return l;
    };
    // Weights large enough that attention is far from uniform, so the scale of q·k matters.
    const plain = { ...cfg.model, initStd: 0.3 };
    const normed = { ...plain, qkNorm: true };
    expect(await loss(normed, 4)).toBeCloseTo(await loss(normed, 1), 4);
    // Without the norms the scale matters: the check above can fail.
    expect(Math.abs((await loss(plain, 4)) - (await loss(plain, 1)))).toBeGreaterThan(1e-2);
  });

  it('the v bias is added to every position: with Wv = 0 each attention output is Wo · bv', async () => {
    const b = new CpuBackend();
    const s = { batch: 1, seqLen: 5, heads: 4, kvHeads: 2, headDim: 8, ropeBase: 10000, qkvBias: true, qkNorm: false, normEps: 1e-5 };
    const d = 32;
    const rows = s.batch * s.seqLen;
    const store = new ParamStore(b);
    const arena = new Arena(b);
    const attn = new SelfAttention(store, arena, 'attn', d, s, new AttentionScratch(arena, s), 0.2, 0.2);
    store.materialize(4);
    const v = (await b.download(store.value)) as Float32Array;
    const rng = new PhiloxStream(5, RngPurpose.harness);
    const wv = store.find('attn.wv');
    const bv = store.find('attn.bv');
    v.fill(0, wv.offset, wv.offset + wv.value.size);
    for (let i = 0; i < bv.value.size; i++) v[bv.offset + i] = rng.normal();
    b.upload(store.value, v);
    const x = arena.alloc([rows, d]);
    b.upload(x, Float32Array.from({ length: rows * d }, () => rng.normal()));
    const out = arena.alloc([rows, d]);
    const residual = arena.alloc([rows, d]);
    b.upload(residual, new Float32Array(rows * d));
    const segIds = arena.alloc([1, s.seqLen], 'i32');
    const positions = arena.alloc([1, s.seqLen], 'i32');
    b.upload(segIds, new Int32Array(s.seqLen));
    b.upload(positions, Int32Array.from({ length: s.seqLen }, (_, i) => i));
    attn.forward(b, x, residual, out, segIds, positions, true);
    const got = (await b.download(out)) as Float32Array;
    // Query head h reads kv head floor(h / 2): its value row is bv's slice for that kv head.
    const wo = store.find('attn.wo');
    const u = Array.from({ length: s.heads * s.headDim }, (_, j) => v[bv.offset + Math.floor(j / s.headDim / 2) * s.headDim + (j % s.headDim)]!);
    for (let r = 0; r < rows; r++) {
      for (let o = 0; o < d; o++) {
        let want = 0;
        for (let j = 0; j < u.length; j++) want += v[wo.offset + o * u.length + j]! * u[j]!;
        expect(got[r * d + o]).toBeCloseTo(want, 4);
      }
    }
    arena.destroy();
    store.destroy();
  });

  const variants = [['', cfg.model, false], [', q/k/v biases and q/k norms', qwenish, false], [', q/k/v in one GEMM', fusedQkv, true]] as const;
  for (const [variant, model, fused] of variants) for (const causal of [true, false]) {
    it(`backward matches finite differences of the loss (${causal ? 'causal' : 'bidirectional'}, GQA, two documents per row${variant})`, async () => {
      const b = new CpuBackend();
      const B = 2, T = 8, N = B * T;
      const m = new LlamaModel(b, model, B, 3);
      for (const blk of m.blocks) expect(blk.attn.fused).toBe(fused);
      await randomizeBiasesAndNorms(m, 8);
      const inputs = Int32Array.from({ length: N }, (_, i) => (i * 37 + 11) % 256);
      const targets = Int32Array.from({ length: N }, (_, i) => (i % 5 === 0 ? -1 : (i * 53 + 7) % 256));
      const segIds = Int32Array.from({ length: N }, (_, i) => (i % T < 3 ? 0 : 1));
      const positions = Int32Array.from({ length: N }, (_, i) => (i % T < 3 ? i % T : (i % T) - 3));
      m.setBatch({ inputs, targets, segIds, positions, weights: Float32Array.from({ length: N }, (_, i) => 0.5 + (i % 3)) }, causal);
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

  it('forwardBackward (loss and its gradient in one op) gives the same losses and gradients as forward() then backward()', async () => {
    const b = new CpuBackend();
    const B = 2, T = 8, N = B * T;
    const m = new LlamaModel(b, cfg.model, B, 4);
    const inputs = Int32Array.from({ length: N }, (_, i) => (i * 37 + 11) % 256);
    const targets = Int32Array.from({ length: N }, (_, i) => (i % 5 === 0 ? -1 : (i * 53 + 7) % 256));
    m.setBatch({ inputs, targets, segIds: new Int32Array(N), positions: Int32Array.from({ length: N }, (_, i) => i % T), weights: Float32Array.from({ length: N }, (_, i) => 0.5 + (i % 3)) }, false);
    const pass = async (run: () => void) => {
      m.store.zeroGrads();
      run();
      return { loss: await m.loss(), tokens: await m.tokenLosses(), grad: (await b.download(m.store.grad)) as Float32Array };
    };
    const split = await pass(() => {
      m.forward();
      m.backward();
    });
    const fused = await pass(() => m.forwardBackward());
    expect(split.grad.some((g) => g !== 0)).toBe(true);
    expect(fused.loss).toBe(split.loss);
    expect(fused.tokens).toEqual(split.tokens);
    // The same arithmetic, save that the fused op's gradient uses the lse before its rounding to
    // f32 storage: equal to a few f32 ulps.
    const scale = Math.max(...split.grad.map(Math.abs));
    for (let i = 0; i < split.grad.length; i++) expect(Math.abs(fused.grad[i]! - split.grad[i]!), `grad ${i}`).toBeLessThanOrEqual(1e-6 * scale);
    m.destroy();
  });

  const overwriteVariants = [
    ['tied embeddings, two logit blocks', cfg.model, 2],
    ['untied embeddings', { ...cfg.model, tieEmbeddings: false }, 1],
    ['q/k/v biases and q/k norms', qwenish, 1],
    ['q/k/v in one GEMM', fusedQkv, 1],
  ] as const;
  for (const [variant, model, logitChunks] of overwriteVariants) {
    it(`forwardBackward(true) overwrites every gradient, whatever the buffer held, and a second micro-batch adds to it (${variant})`, async () => {
      const b = new CpuBackend();
      const B = 2, T = 8, N = B * T;
      const m = new LlamaModel(b, model, B, 5, { logitChunks });
      await randomizeBiasesAndNorms(m, 3);
      const batch = (k: number) => ({
        inputs: Int32Array.from({ length: N }, (_, i) => (i * 37 + 11 * k) % 256),
        targets: Int32Array.from({ length: N }, (_, i) => (i % 5 === k ? -1 : (i * 53 + 7 * k) % 256)),
        segIds: Int32Array.from({ length: N }, (_, i) => (i % T < 3 ? 0 : 1)),
        positions: Int32Array.from({ length: N }, (_, i) => (i % T < 3 ? i % T : (i % T) - 3)),
      });
      const grads = async () => (await b.download(m.store.grad)) as Float32Array;
      const run = (k: number, overwrite: boolean) => {
        m.setBatch({ ...batch(k), weights: Float32Array.from({ length: N }, (_, i) => 0.5 + ((i + k) % 3)) }, k === 1);
        m.forwardBackward(overwrite);
      };
      // Reference: zeroed, then two micro-batches added.
      m.store.zeroGrads();
      run(1, false);
      const first = await grads();
      run(2, false);
      const both = await grads();
      // Overwriting: over a buffer of garbage (in the padding between parameters too, which nothing writes).
      const garbage = Float32Array.from({ length: first.length }, (_, i) => (i % 7) - 3.5);
      b.upload(m.store.grad, garbage);
      run(1, true);
      const over = await grads();
      for (const p of m.store.list) {
        for (let i = p.offset; i < p.offset + p.value.size; i++) expect(over[i], `${p.name}[${i - p.offset}]`).toBe(first[i]);
      }
      run(2, false);
      const overBoth = await grads();
      for (const p of m.store.list) {
        for (let i = p.offset; i < p.offset + p.value.size; i++) expect(overBoth[i], `${p.name}[${i - p.offset}]`).toBe(both[i]);
      }
      expect(first.some((g) => g !== 0)).toBe(true);
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
