/**
 * The mdlm objective's options: MegaDLMs' empirical weighting (1/p of the realised masked
 * fraction) and random-length truncation (varilen), on the CPU backend with a tiny model.
 */
import { describe, expect, it } from 'vitest';
import { CpuBackend } from '../../src/backend/cpu/cpu.js';
import { resolveConfig } from '../../src/config/load.js';
import { LlamaModel } from '../../src/model/llama.js';
import { MdlmObjective, type MdlmOptions, truncateRows } from '../../src/objectives/mdlm.js';
import type { TokenBatch } from '../../src/objectives/objective.js';

const B = 3;
const T = 16;
const MASK = 263;
const cfg = resolveConfig({
  preset: 'tiny',
  overrides: { 'model.dModel': '32', 'model.nLayers': '1', 'model.nHeads': '4', 'model.ffnHidden': '64', 'model.seqLen': String(T), 'train.steps': '1', 'train.warmupSteps': '0' },
});

function objective(o: Partial<MdlmOptions> = {}): MdlmObjective {
  return new MdlmObjective({ maskId: MASK, seed: 42, schedule: 'linear', tMin: 1e-3, tMax: 1, antithetic: true, weighting: 'elbo', varilenProb: 0, evalNoiseLevels: 4, ...o });
}

/** Two documents in row 1 (segment ids 0 then 1); tokens never the mask id. */
function batch(tokens = Int32Array.from({ length: B * T }, (_, i) => (i * 29 + 5) % 250)): TokenBatch {
  const segIds = Int32Array.from({ length: B * T }, (_, i) => (Math.floor(i / T) === 1 && i % T >= 6 ? 1 : 0));
  const positions = Int32Array.from({ length: B * T }, (_, i) => (Math.floor(i / T) === 1 && i % T >= 6 ? (i % T) - 6 : i % T));
  return { batchSize: B, seqLen: T, tokens, targets: tokens, segIds, positions };
}

async function noised(obj: MdlmObjective, b: TokenBatch, step: number, fixedT?: number) {
  const backend = new CpuBackend();
  const model = new LlamaModel(backend, cfg.model, B, 7);
  await obj.prepare(model, b, step, undefined, fixedT);
  const { ids, weights } = await model.downloadInputs();
  model.forward();
  const losses = await model.tokenLosses();
  model.destroy();
  return { ids, weights, losses };
}

describe('mdlm empirical weighting', () => {
  it('gives each masked token n/m for the realised mask (same mask as elbo), so every row sums to its length', async () => {
    const b = batch();
    const elbo = await noised(objective(), b, 3);
    const emp = await noised(objective({ weighting: 'empirical' }), b, 3);
    expect(emp.ids).toEqual(elbo.ids);
    const t = objective().noiseLevels(B, 3, 0);
    for (let r = 0; r < B; r++) {
      const row = Array.from(emp.ids.subarray(r * T, (r + 1) * T));
      const m = row.filter((x) => x === MASK).length;
      expect(m).toBeGreaterThan(0);
      for (let i = 0; i < T; i++) {
        const masked = row[i] === MASK;
        expect(emp.weights[r * T + i]).toBeCloseTo(masked ? T / m : 0, 5);
        expect(elbo.weights[r * T + i]).toBeCloseTo(masked ? 1 / t[r]! : 0, 4);
      }
    }
  });

  it('evaluation (a fixed t) keeps the ELBO weight whatever the training weighting', async () => {
    const e = await noised(objective({ weighting: 'empirical' }), batch(), 0, 0.5);
    for (let i = 0; i < B * T; i++) expect(e.weights[i]).toBe(e.ids[i] === MASK ? 2 : 0);
  });
});

describe('mdlm random-length truncation (varilen)', () => {
  it('keeps full rows at probability 0, truncates every row to 2..T at 1, keyed by (seed, step, rank)', () => {
    expect(Array.from(objective().keptLengths(8, T, 0, 0))).toEqual(Array(8).fill(T));
    const all = objective({ varilenProb: 1 });
    const a = all.keptLengths(64, T, 5, 0);
    for (const len of a) expect(len >= 2 && len <= T).toBe(true);
    expect(all.keptLengths(64, T, 5, 0)).toEqual(a);
    expect(all.keptLengths(64, T, 6, 0)).not.toEqual(a);
    expect(all.keptLengths(64, T, 5, 1)).not.toEqual(a);
  });

  it('truncates about varilenProb of the rows, lengths uniform over 2..T', () => {
    const rows = 20000;
    const lengths = objective({ varilenProb: 0.25 }).keptLengths(rows, T, 1, 0);
    const truncated = objective({ varilenProb: 1 }).keptLengths(rows, T, 1, 0);
    // With probability 1 every row takes its drawn length: the mean of U{2..T} is (2 + T) / 2.
    const mean = truncated.reduce((s, x) => s + x, 0) / rows;
    expect(mean).toBeGreaterThan((2 + T) / 2 - 0.15);
    expect(mean).toBeLessThan((2 + T) / 2 + 0.15);
    // Rows kept at T are the untruncated 75% plus 1/15 of the truncated ones.
    const full = Array.from(lengths).filter((l) => l === T).length / rows;
    expect(full).toBeGreaterThan(0.75 + 0.25 / 15 - 0.015);
    expect(full).toBeLessThan(0.75 + 0.25 / 15 + 0.015);
  });

  it('truncateRows pads the tail and puts it in a segment after the kept one', () => {
    const b = batch();
    const r = truncateRows(b, Int32Array.of(T, 10, 4));
    expect(r.tokens.subarray(0, T)).toEqual(b.tokens.subarray(0, T));
    expect(Array.from(r.tokens.subarray(T + 10, 2 * T))).toEqual(Array(6).fill(-1));
    expect(Array.from(r.segIds.subarray(T + 10, 2 * T))).toEqual(Array(6).fill(2));
    expect(Array.from(r.segIds.subarray(2 * T + 4, 3 * T))).toEqual(Array(12).fill(1));
    expect(r.tokens.subarray(2 * T, 2 * T + 4)).toEqual(b.tokens.subarray(2 * T, 2 * T + 4));
  });

  it('a truncated row is trained as the short sequence it keeps: tail out of the loss and out of sight', async () => {
    const obj = objective({ varilenProb: 1, weighting: 'empirical' });
    const lengths = obj.keptLengths(B, T, 9, 0);
    const b = batch();
    const backend = new CpuBackend();
    const model = new LlamaModel(backend, cfg.model, B, 7);
    await obj.prepare(model, b, 9);
    const { ids, weights } = await model.downloadInputs();
    model.forward();
    const losses = await model.tokenLosses();
    const params = (await backend.download(model.store.value)) as Float32Array;
    for (let r = 0; r < B; r++) {
      const len = lengths[r]!;
      const row = Array.from(ids.subarray(r * T, (r + 1) * T));
      expect(row.slice(len)).toEqual(Array(T - len).fill(MASK)); // a real id for the embedding
      expect(Array.from(weights.subarray(r * T + len, (r + 1) * T))).toEqual(Array(T - len).fill(0));
      // Empirical weights over the kept prefix only: len / masked.
      const m = row.slice(0, len).filter((x) => x === MASK).length;
      expect(m).toBeGreaterThan(0);
      for (let i = 0; i < len; i++) expect(weights[r * T + i]).toBeCloseTo(row[i] === MASK ? len / m : 0, 5);
      // The same noised prefix alone, in a model of seqLen = len, has the same token losses.
      const short = new LlamaModel(backend, { ...cfg.model, seqLen: len }, 1, 7);
      backend.upload(short.store.value, params);
      const at = (a: Int32Array) => a.slice(r * T, r * T + len);
      short.setBatch({ inputs: at(ids), targets: at(b.tokens), segIds: at(b.segIds), positions: at(b.positions), weights: weights.slice(r * T, r * T + len) }, false);
      short.forward();
      const alone = await short.tokenLosses();
      for (let i = 0; i < len; i++) expect(losses[r * T + i]).toBeCloseTo(alone[i]!, 5);
      short.destroy();
    }
    expect(Math.min(...lengths)).toBeLessThan(T - 2);
    model.destroy();
  });
});

describe('mdlm over data-parallel ranks', () => {
  it('a shard of the global batch gets the ids and weights of its rows in the whole batch: noise levels, truncation and masks', async () => {
    const obj = objective({ varilenProb: 0.7, weighting: 'empirical', antithetic: true });
    const b = batch();
    const inputs = async (rows: TokenBatch, shard?: { first: number; total: number }): Promise<{ ids: Int32Array; weights: Float32Array }> => {
      const model = new LlamaModel(new CpuBackend(), cfg.model, rows.batchSize, 7);
      await obj.prepare(model, rows, 11, shard);
      const got = await model.downloadInputs();
      model.destroy();
      return { ids: got.ids, weights: got.weights };
    };
    const whole = await inputs(b);
    for (const [first, rows] of [[0, 1], [1, 1], [2, 1], [1, 2]] as const) {
      const cut = <A extends Int32Array>(a: A): A => a.slice(first * T, (first + rows) * T) as A;
      const part: TokenBatch = { batchSize: rows, seqLen: T, tokens: cut(b.tokens), targets: cut(b.targets), segIds: cut(b.segIds), positions: cut(b.positions) };
      const got = await inputs(part, { first, total: B });
      expect(got.ids, `rows ${first}..${first + rows - 1}`).toEqual(cut(whole.ids));
      expect(got.weights).toEqual(whole.weights.slice(first * T, (first + rows) * T));
    }
  });
});
