/**
 * GRPO's arithmetic (src/rl/grpo.ts): the group-normalised advantages, and the loss weights
 * against the objective they stand for: −w/N is the derivative of the objective L in each
 * token's log-probability (checked by finite differences, clipped tokens and the KL penalty
 * included), so a backward pass of the weighted cross-entropy is L's gradient. On a real model,
 * one step with a positive advantage makes the completion likelier and with a negative one less
 * likely.
 */
import { describe, expect, it } from 'vitest';
import { CpuBackend } from '../../src/backend/cpu/cpu.js';
import { LlamaModel } from '../../src/model/llama.js';
import { AdamW } from '../../src/optim/adamw.js';
import { PhiloxStream, RngPurpose } from '../../src/rng/philox.js';
import { groupAdvantages, grpoWeights } from '../../src/rl/grpo.js';
import { targetLogProbs } from '../../src/rl/grpo_ar.js';

describe('groupAdvantages', () => {
  it('normalises each group by its own mean and standard deviation; an all-equal group gets zeros', () => {
    const a = groupAdvantages([1, 0, 0, 1, 3, 3, 3, 3], 4);
    // Group 1: mean 0.5, std 0.5.
    expect(Array.from(a.subarray(0, 4)).map((x) => Number(x.toFixed(3)))).toEqual([1, -1, -1, 1]);
    expect(Array.from(a.subarray(4))).toEqual([0, 0, 0, 0]);
    const b = groupAdvantages([0, 0, 0, 1], 4); // mean 0.25, std √(3)/4
    expect(b[3]).toBeCloseTo(0.75 / (Math.sqrt(3) / 4), 3);
    expect(b[0]).toBeCloseTo(-0.25 / (Math.sqrt(3) / 4), 3);
    expect(() => groupAdvantages([1, 2, 3], 2)).toThrow(/not groups of 2/);
  });
});

describe('grpoWeights', () => {
  const N = 12;
  const rng = new PhiloxStream(3, RngPurpose.harness);
  const completions = [
    { positions: [0, 1, 2], advantage: 1.3 },
    { positions: [4, 5], advantage: -0.7 },
    { positions: [8, 9, 10, 11], advantage: 0.4 },
  ];
  const logp = Float32Array.from({ length: N }, () => -0.2 - 2 * rng.uniform());
  // Ratios spread over [0.6, 1.4]: with ε 0.2 some tokens are clipped on either side.
  const oldLogp = Float32Array.from(logp, (l) => l - Math.log(0.6 + 0.8 * rng.uniform()));
  const refLogp = Float32Array.from(logp, (l) => l + 0.5 * (rng.uniform() - 0.5));
  const inputs = { completions, oldLogp, refLogp, clip: 0.2, beta: 0.1 };

  it('the weights are −N times the objective\'s derivative in each log-probability (finite differences)', () => {
    const { weights, clipFraction } = grpoWeights({ ...inputs, logp });
    expect(clipFraction).toBeGreaterThan(0);
    expect(clipFraction).toBeLessThan(1);
    const h = 1e-3;
    for (let i = 0; i < N; i++) {
      const at = (d: number) => grpoWeights({ ...inputs, logp: Float32Array.from(logp, (l, j) => (j === i ? l + d : l)) }).loss;
      const dL = (at(h) - at(-h)) / (2 * h);
      expect(-weights[i]! / N).toBeCloseTo(dL, 3);
    }
    // Off the completions: no weight.
    for (const i of [3, 6, 7]) expect(weights[i]).toBe(0);
  });

  it('a clipped token has no ratio gradient: ratio above 1+ε with A > 0, below 1−ε with A < 0', () => {
    const one = (ratio: number, advantage: number) =>
      grpoWeights({ completions: [{ positions: [0], advantage }], logp: Float32Array.of(Math.log(ratio)), oldLogp: Float32Array.of(0), clip: 0.2, beta: 0 });
    expect(one(1.3, 1).weights[0]).toBe(0);
    expect(one(1.3, 1).clipFraction).toBe(1);
    expect(one(0.7, -1).weights[0]).toBe(0);
    // The other side of each stays: the ratio times the advantage.
    expect(one(1.3, -1).weights[0]).toBeCloseTo(-1.3, 5);
    expect(one(0.7, 1).weights[0]).toBeCloseTo(0.7, 5);
    expect(one(1.1, 2).weights[0]).toBeCloseTo(2.2, 5);
    expect(one(1.1, 2).clipFraction).toBe(0);
  });

  it('the KL is the mean of each completion\'s mean k3 estimate, zero at the reference', () => {
    const { kl } = grpoWeights({ ...inputs, logp, refLogp: logp });
    expect(kl).toBe(0);
    const k3 = (i: number) => Math.exp(refLogp[i]! - logp[i]!) - (refLogp[i]! - logp[i]!) - 1;
    const want = completions.reduce((s, c) => s + c.positions.reduce((t, i) => t + k3(i), 0) / c.positions.length, 0) / completions.length;
    expect(grpoWeights({ ...inputs, logp }).kl).toBeCloseTo(want, 5);
  });
});

describe('GRPO weights through a model', () => {
  it('one update with a positive advantage raises the completion\'s log-probability; a negative one lowers it', async () => {
    const backend = new CpuBackend();
    const cfg = { vocabSize: 16, dModel: 16, nLayers: 1, nHeads: 2, nKvHeads: 2, ffnHidden: 32, seqLen: 8, ropeTheta: 10000, normEps: 1e-5, qkNorm: false, qkvBias: false, tieEmbeddings: false, initStd: 0.1 };
    const T = cfg.seqLen;
    // One row: prompt [1, 2], completion [5, 7, 3]; targets on the completion only.
    const inputs = new Int32Array(T);
    inputs.set([1, 2, 5, 7, 3]);
    const targets = new Int32Array(T).fill(-1);
    targets.set([5, 7, 3], 1);
    const segIds = Int32Array.from({ length: T }, (_, j) => (j < 5 ? 0 : 1));
    const positions = Int32Array.from({ length: T }, (_, j) => j);
    const batch = { inputs, targets, segIds, positions };
    const sumAfterUpdate = async (advantage: number): Promise<[number, number]> => {
      const model = new LlamaModel(backend, cfg, 1, 5);
      const opt = new AdamW(model.store, { beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0, gradClip: 0 });
      try {
        const before = await targetLogProbs(model, batch);
        const { weights } = grpoWeights({ completions: [{ positions: [1, 2, 3], advantage }], logp: before, oldLogp: before, clip: 0.2, beta: 0 });
        model.setBatch({ ...batch, weights }, true);
        model.forwardBackward(true, opt.takeDeferred());
        opt.measure();
        opt.defer(1e-2, 1);
        opt.flush();
        const after = await targetLogProbs(model, batch);
        return [before.reduce((s, x) => s + x, 0), after.reduce((s, x) => s + x, 0)];
      } finally {
        model.destroy();
      }
    };
    const [b1, a1] = await sumAfterUpdate(1);
    const [b2, a2] = await sumAfterUpdate(-1);
    expect(b1).toBeCloseTo(b2, 6); // same initial model
    expect(a1).toBeGreaterThan(b1 + 0.05);
    expect(a2).toBeLessThan(b2 - 0.05);
    backend.destroy();
  });
});
