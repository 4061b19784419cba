/** KV-cached decoding: the same logits as the full causal forward at every position, and the same samples. */
import { describe, expect, it } from 'vitest';
import type { Backend } from '../src/backend/backend.js';
import { CpuBackend } from '../src/backend/cpu/cpu.js';
import { resolveConfig } from '../src/config/load.js';
import { relativeError } from '../src/harness/parity.js';
import { Decoder } from '../src/model/decode.js';
import { LlamaModel } from '../src/model/llama.js';
import { modelLogits } from '../src/model/logits.js';
import { sampleAr } from '../src/sampling/ar.js';
import { hasWebGpu, webgpuBackend } from './support/webgpu.js';

const T = 12;
function model(backend: Backend, over: Record<string, string> = {}): LlamaModel {
  const cfg = resolveConfig({
    preset: 'tiny',
    overrides: { 'model.dModel': '32', 'model.nLayers': '2', 'model.nHeads': '4', 'model.ffnHidden': '64', 'model.seqLen': String(T), 'model.initStd': '0.2', ...over },
  });
  return new LlamaModel(backend, cfg.model, 1, 11);
}

const tokens = Array.from({ length: T }, (_, i) => (i * 37 + 5) % 250);

/** Logits of every position from one full causal forward of the whole sequence. */
async function fullLogits(m: LlamaModel): Promise<Float32Array> {
  const n = tokens.length;
  m.setBatch({ inputs: Int32Array.from(tokens), targets: new Int32Array(n).fill(-1), segIds: new Int32Array(n), positions: Int32Array.from({ length: n }, (_, i) => i) }, true);
  m.forwardLogits();
  return m.downloadLogits();
}

const variants: [string, Record<string, string>][] = [
  ['multi-head', {}],
  ['grouped-query 4/2, untied', { 'model.nKvHeads': '2', 'model.tieEmbeddings': 'false' }],
  ['q/k/v biases', { 'model.qkvBias': 'true' }],
  ['q/k norms, grouped-query 4/1', { 'model.qkNorm': 'true', 'model.nKvHeads': '1' }],
];

describe('KV-cached decoding', () => {
  const backends: [string, () => Promise<Backend>][] = [['cpu', async () => new CpuBackend()]];
  if (hasWebGpu) backends.push(['webgpu', async () => (await webgpuBackend())!]);
  for (const [bname, get] of backends) {
    for (const [label, over] of variants) {
      it(`${bname}, ${label}: each position's logits are the full forward's`, async () => {
        const m = model(await get(), over);
        const want = await fullLogits(m);
        const V = m.cfg.vocabSize;
        const dec = new Decoder(m);
        for (let i = 0; i < T; i++) {
          const got = await dec.next(tokens[i]!);
          expect(relativeError(got, want.subarray(i * V, (i + 1) * V), false), `position ${i}`).toBeLessThan(2e-5);
        }
        await expect(dec.next(1)).rejects.toThrow(/the cache holds 12 positions/);
        dec.reset();
        expect(relativeError(await dec.next(tokens[0]!), want.subarray(0, V), false)).toBeLessThan(2e-5);
        dec.destroy();
        m.destroy();
      });
    }
  }

  it('sampling with the decoder gives the tokens of full recomputation, past the context too (sliding window)', async () => {
    const m = model(new CpuBackend());
    const base = { prompt: tokens.slice(0, 3), maxNewTokens: T + 4, seqLen: T, vocab: m.cfg.vocabSize, temperature: 0.8, topK: 0, topP: 1, seed: 5 };
    const plain = await sampleAr({ ...base, logits: modelLogits(m, true) });
    const dec = new Decoder(m);
    const cached = await sampleAr({ ...base, logits: modelLogits(m, true), decoder: dec });
    expect(cached).toEqual(plain);
    expect(cached.length).toBe(T + 4);
    dec.destroy();
    m.destroy();
  });
});
