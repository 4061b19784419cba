/**
 * Supervised fine-tuning in each objective (a batch with a loss mask), on the CPU backend with a
 * tiny model: masked diffusion never masks a prompt token and weighs each row's reply to its mean;
 * the autoregressive loss is the mean over rows of each row's mean cross-entropy of the
 * assistant's targets, and nothing else.
 */
import { describe, expect, it } from 'vitest';
import { CpuBackend } from '../../src/backend/cpu/cpu.js';
import { resolveConfig } from '../../src/config/load.js';
import { LlamaModel } from '../../src/model/llama.js';
import { ArObjective } from '../../src/objectives/ar.js';
import { MdlmObjective } from '../../src/objectives/mdlm.js';
import type { TokenBatch } from '../../src/objectives/objective.js';

const B = 3;
const T = 16;
const MASK = 263;
const EOS = 256;
const cfg = resolveConfig({
  preset: 'tiny',
  overrides: { 'model.dModel': '32', 'model.nLayers': '1', 'model.nHeads': '4', 'model.ffnHidden': '64', 'model.seqLen': String(T), 'train.steps': '1', 'train.warmupSteps': '0' },
});

/**
 * Row 0: one conversation, prompt 0..5, reply 6..9, EOS padding in the loss 10..15. Row 1: two
 * conversations (prompts 0..2 and 6..9, replies 3..5 and 10..15). Row 2: a prompt with a
 * two-token reply at its end.
 */
function chatBatch(): TokenBatch {
  const prompt = [[0, 6], [0, 3, 6, 10], [0, 14]];
  const segIds = new Int32Array(B * T);
  const positions = new Int32Array(B * T);
  const lossMask = new Uint8Array(B * T);
  const tokens = Int32Array.from({ length: B * T }, (_, i) => (i * 29 + 5) % 250);
  for (let r = 0; r < B; r++) {
    const spans = prompt[r]!;
    for (let j = 0; j < T; j++) {
      const second = r === 1 && j >= 6;
      segIds[r * T + j] = second ? 1 : 0;
      positions[r * T + j] = second ? j - 6 : j;
      let inPrompt = false;
      for (let k = 0; k < spans.length; k += 2) inPrompt ||= j >= spans[k]! && j < spans[k + 1]!;
      lossMask[r * T + j] = inPrompt ? 0 : 1;
    }
  }
  for (let j = 10; j < T; j++) tokens[j] = EOS;
  const targets = Int32Array.from(tokens, (_, i) => ((i + 1) % T === 0 || segIds[i + 1] !== segIds[i] ? -1 : tokens[i + 1]!));
  return { batchSize: B, seqLen: T, tokens, targets, segIds, positions, lossMask };
}

describe('supervised fine-tuning', () => {
  it('mdlm: prompt tokens are never masked nor in the loss; reply tokens are masked with probability t at w(t) · T / reply length', async () => {
    const batch = chatBatch();
    const mask = batch.lossMask!;
    const replyLength = [0, 1, 2].map((r) => mask.subarray(r * T, (r + 1) * T).reduce((a, b) => a + b, 0));
    const obj = new MdlmObjective({ maskId: MASK, seed: 42, schedule: 'linear', tMin: 1e-3, tMax: 1, antithetic: true, weighting: 'elbo', varilenProb: 0.5, evalNoiseLevels: 4 });
    const model = new LlamaModel(new CpuBackend(), cfg.model, B, 7);
    let masked = 0;
    let reply = 0;
    const padMasked = new Set<number>();
    for (let step = 0; step < 40; step++) {
      const fixedT = step % 4 === 3 ? 0.99 : undefined;
      await obj.prepare(model, batch, step, undefined, fixedT);
      const { ids, weights } = await model.downloadInputs();
      const t = fixedT !== undefined ? [fixedT, fixedT, fixedT] : Array.from(obj.noiseLevels(B, step, 0));
      for (let r = 0; r < B; r++) {
        let rowMasked = 0;
        for (let j = 0; j < T; j++) {
          const i = r * T + j;
          if (!mask[i]) {
            // Whatever the noise level (0.99 included) and varilen: the prompt is read as it is.
            expect(ids[i], `row ${r} position ${j}, step ${step}`).toBe(batch.tokens[i]);
            expect(weights[i]).toBe(0);
            continue;
          }
          reply++;
          if (ids[i] === MASK) {
            masked++;
            rowMasked++;
            if (batch.tokens[i] === EOS) padMasked.add(j);
            expect(weights[i]).toBeCloseTo((1 / t[r]!) * (T / replyLength[r]!), 2);
          } else {
            expect(ids[i]).toBe(batch.tokens[i]);
            expect(weights[i]).toBe(0);
          }
        }
        expect(rowMasked).toBeGreaterThan(0);
      }
    }
    // t is spread over (0, 1] (and 0.99 every fourth step): about half the reply, and the EOS padding with it.
    expect(masked / reply).toBeGreaterThan(0.4);
    expect(masked / reply).toBeLessThan(0.8);
    expect(padMasked.size).toBe(6);
    expect(obj.scoredTokens(batch)).toBe(B * T);
    model.destroy();
  });

  it('ar: the loss is the mean over rows of each row\'s mean cross-entropy over the assistant\'s targets', async () => {
    const batch = chatBatch();
    const model = new LlamaModel(new CpuBackend(), cfg.model, B, 7);
    const ar = new ArObjective();
    await ar.prepare(model, batch);
    model.forward();
    const sft = await model.loss();
    const plain = new ArObjective();
    await plain.prepare(model, { ...batch, lossMask: undefined });
    model.forward();
    const all = await model.loss();
    // Every position's cross-entropy from the logits, then the mean the mask asks for.
    model.setBatch({ inputs: batch.tokens, targets: batch.targets, segIds: batch.segIds, positions: batch.positions }, true);
    model.forwardLogits();
    const logits = await model.downloadLogits();
    const V = cfg.model.vocabSize;
    let want = 0;
    let plainSum = 0;
    let plainCount = 0;
    for (let r = 0; r < B; r++) {
      let sum = 0;
      let n = 0;
      for (let j = 0; j < T; j++) {
        const i = r * T + j;
        const target = batch.targets[i]!;
        if (target < 0) continue;
        const row = logits.subarray(i * V, (i + 1) * V);
        const max = Math.max(...row);
        const ce = Math.log(row.reduce((a, x) => a + Math.exp(x - max), 0)) + max - row[target]!;
        plainSum += ce;
        plainCount++;
        // The target is the next token: in the loss when that token is the assistant's.
        if (!batch.lossMask![i + 1]) continue;
        sum += ce;
        n++;
      }
      want += sum / n / B;
    }
    expect(Math.abs(sft - want) / want).toBeLessThan(1e-5);
    // Without the mask, every target counts (summed over B·T): another number.
    expect(Math.abs(all - plainSum / (B * T)) / all).toBeLessThan(1e-5);
    expect(Math.abs(sft - all) / all).toBeGreaterThan(0.01);
    expect(ar.scoredTokens(batch)).toBe(B * T);
    expect(plain.scoredTokens({ ...batch, lossMask: undefined })).toBe(plainCount);
    model.destroy();
  });
});
