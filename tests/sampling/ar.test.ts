import { describe, expect, test } from 'vitest';
import { sampleAr, type ArSampleOptions } from '../../src/sampling/ar.js';
import type { LogitsFn } from '../../src/sampling/types.js';
import { mdlmError } from './helpers.js';

const V = 8;
/** Deterministic next-token table: after token t the model strongly prefers next[t]. */
const next = [3, 5, 7, 1, 6, 2, 0, 4];

/** A fake causal model: at every position, logits favour next[token], others get graded values. */
function tableModel(calls?: { len: number; tokens: number[] }[]): LogitsFn {
  return async (tokens, rows, seqLen) => {
    calls?.push({ len: seqLen, tokens: Array.from(tokens) });
    const out = new Float32Array(rows * seqLen * V);
    for (let p = 0; p < rows * seqLen; p++) {
      for (let v = 0; v < V; v++) out[p * V + v] = 0.1 * v;
      out[p * V + next[tokens[p]!]!] = 4;
    }
    return out;
  };
}

function opts(o: Partial<ArSampleOptions> = {}): ArSampleOptions {
  return { logits: tableModel(), prompt: [0], maxNewTokens: 6, seqLen: 16, vocab: V, temperature: 0, topK: 0, topP: 1, seed: 1, ...o };
}

function followTable(start: number, n: number): number[] {
  const out: number[] = [];
  let t = start;
  for (let i = 0; i < n; i++) out.push((t = next[t]!));
  return out;
}

describe('sampleAr', () => {
  test('greedy follows the next-token table', async () => {
    expect(await sampleAr(opts())).toEqual(followTable(0, 6));
    expect(await sampleAr(opts({ prompt: [2, 4] }))).toEqual(followTable(4, 6));
  });

  test('top-k = 1 equals greedy; temperature → 0 equals greedy', async () => {
    const greedy = await sampleAr(opts({ maxNewTokens: 10 }));
    expect(await sampleAr(opts({ maxNewTokens: 10, temperature: 3, topK: 1 }))).toEqual(greedy);
    expect(await sampleAr(opts({ maxNewTokens: 10, temperature: 1e-3 }))).toEqual(greedy);
  });

  test('same seed → same samples; different seed → different', async () => {
    const o = { maxNewTokens: 40, temperature: 5 };
    const a = await sampleAr(opts({ ...o, seed: 42 }));
    expect(await sampleAr(opts({ ...o, seed: 42 }))).toEqual(a);
    expect(await sampleAr(opts({ ...o, seed: 43 }))).not.toEqual(a);
  });

  test('eos stops (eos included), onToken streams every id', async () => {
    const seen: number[] = [];
    const out = await sampleAr(opts({ maxNewTokens: 20, eosId: 6, onToken: (id) => seen.push(id) }));
    expect(out).toEqual([3, 1, 5, 2, 7, 4, 6]);
    expect(seen).toEqual(out);
    expect(await sampleAr(opts({ maxNewTokens: 8, eosId: 6, stopAtEos: false }))).toHaveLength(8);
  });

  test('sliding window: the model sees at most the last seqLen tokens', async () => {
    const calls: { len: number; tokens: number[] }[] = [];
    const out = await sampleAr(opts({ logits: tableModel(calls), prompt: [0, 1, 2], seqLen: 4, maxNewTokens: 5 }));
    expect(calls.map((c) => c.len)).toEqual([3, 4, 4, 4, 4]);
    const all = [0, 1, 2, ...out];
    calls.forEach((c, i) => expect(c.tokens).toEqual(all.slice(Math.max(0, 3 + i - 4), 3 + i)));
  });

  test('bad options give MdlmErrors naming the option', async () => {
    expect(await mdlmError(() => sampleAr(opts({ temperature: -1 })))).toMatch(/temperature/);
    expect(await mdlmError(() => sampleAr(opts({ topP: 0 })))).toMatch(/topP/);
    expect(await mdlmError(() => sampleAr(opts({ topP: 1.01 })))).toMatch(/topP/);
    expect(await mdlmError(() => sampleAr(opts({ prompt: [] })))).toMatch(/prompt/);
    expect(await mdlmError(() => sampleAr(opts({ prompt: [V] })))).toMatch(/prompt\[0\] is 8/);
    expect(await mdlmError(() => sampleAr(opts({ stopAtEos: true })))).toMatch(/stopAtEos.*eosId/);
    expect(await mdlmError(() => sampleAr(opts({ maxNewTokens: -1 })))).toMatch(/maxNewTokens/);
    expect(await mdlmError(() => sampleAr(opts({ seed: -1 })))).toMatch(/seed/);
    const short: LogitsFn = async () => new Float32Array(3);
    expect(await mdlmError(() => sampleAr(opts({ logits: short })), 'BAD_SHAPE')).toMatch(/returned 3 floats/);
  });
});
