import { describe, expect, test } from 'vitest';
import { numTransferTokens, sampleDiffusion, type DiffusionSampleOptions } from '../../src/sampling/diffusion.js';
import type { LogitsFn } from '../../src/sampling/types.js';
import { mdlmError } from './helpers.js';

const V = 10;
const MASK = 9;
const PROMPT = [1, 2];
const TARGET = [3, 0, 5, 7, 8, 1, 4, 6];

/**
 * Fake bidirectional model: at generated position i it predicts TARGET[i] with margin conf[i]
 * (larger = more confident). The mask token gets the highest logit of all, so a sampler that
 * forgot to exclude it would emit MASK.
 */
function targetModel(conf: number[] = TARGET.map(() => 8), calls?: Int32Array[]): LogitsFn {
  return async (tokens, rows, seqLen) => {
    calls?.push(tokens.slice());
    expect(rows).toBe(1);
    const out = new Float32Array(rows * seqLen * V);
    for (let p = 0; p < seqLen; p++) {
      const i = p - PROMPT.length;
      if (i >= 0) out[p * V + TARGET[i]!] = conf[i]!;
      out[p * V + MASK] = 100;
    }
    return out;
  };
}

function opts(o: Partial<DiffusionSampleOptions> = {}): DiffusionSampleOptions {
  return {
    logits: targetModel(),
    prompt: PROMPT,
    genLength: 8,
    steps: 8,
    blockLength: 8,
    maskId: MASK,
    vocab: V,
    temperature: 0,
    remasking: 'low_confidence',
    seqLen: 16,
    seed: 1,
    ...o,
  };
}

const gen = (x: Int32Array) => Array.from(x.subarray(PROMPT.length));

describe('numTransferTokens', () => {
  test('spreads evenly, remainder to the first steps', () => {
    expect(numTransferTokens(8, 8)).toEqual([1, 1, 1, 1, 1, 1, 1, 1]);
    expect(numTransferTokens(10, 4)).toEqual([3, 3, 2, 2]);
    expect(numTransferTokens(3, 5)).toEqual([1, 1, 1, 0, 0]);
  });
});

describe('sampleDiffusion', () => {
  for (const remasking of ['low_confidence', 'random'] as const) {
    for (const temperature of [0, 0.5]) {
      test(`reaches the target (${remasking}, temperature ${temperature}); no mask remains; prompt kept`, async () => {
        for (const [steps, blockLength] of [[8, 8], [4, 8], [8, 4], [4, 2], [2, 4]] as const) {
          const x = await sampleDiffusion(opts({ remasking, temperature, steps, blockLength }));
          expect(x).toHaveLength(PROMPT.length + 8);
          expect(Array.from(x.subarray(0, 2))).toEqual(PROMPT);
          expect(gen(x)).toEqual(TARGET);
          expect(x.includes(MASK)).toBe(false);
        }
      });
    }
  }

  test('committed per step matches the schedule; commits are final', async () => {
    // genLength 8, blockLength 8, steps 3 → [3, 3, 2]
    const counts: number[] = [];
    let prev: number[] | null = null;
    await sampleDiffusion(
      opts({
        steps: 3,
        onStep: (t, step, info) => {
          expect(step).toBe(counts.length);
          counts.push(info.committed.length);
          const g = gen(t);
          expect(g.filter((v) => v !== MASK)).toHaveLength(counts.reduce((a, b) => a + b, 0));
          if (prev) prev.forEach((v, i) => v !== MASK && expect(g[i]).toBe(v));
          prev = g;
        },
      }),
    );
    expect(counts).toEqual([3, 3, 2]);
  });

  test('more steps than tokens: zero-count steps call no model but still report', async () => {
    const calls: Int32Array[] = [];
    const counts: number[] = [];
    const x = await sampleDiffusion(opts({ logits: targetModel(undefined, calls), steps: 12, onStep: (_t, _s, i) => counts.push(i.committed.length) }));
    expect(counts).toEqual([1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0]);
    expect(calls).toHaveLength(8);
    expect(gen(x)).toEqual(TARGET);
  });

  test('semi-autoregressive: later blocks stay fully masked until earlier ones are done', async () => {
    // 4 blocks of 2, 8 steps → 2 steps per block, 1 token each.
    const snaps: number[][] = [];
    const blocks: number[] = [];
    const calls: Int32Array[] = [];
    await sampleDiffusion(
      opts({ logits: targetModel(undefined, calls), blockLength: 2, steps: 8, remasking: 'random', onStep: (t, _s, info) => (snaps.push(gen(t)), blocks.push(info.block)) }),
    );
    expect(blocks).toEqual([0, 0, 1, 1, 2, 2, 3, 3]);
    expect(calls).toHaveLength(8);
    snaps.forEach((g, step) => {
      const b = Math.floor(step / 2);
      for (let i = 0; i < 8; i++) {
        const blk = Math.floor(i / 2);
        if (blk < b) expect(g[i]).toBe(TARGET[i]); // earlier blocks done
        if (blk > b) expect(g[i]).toBe(MASK); // later blocks untouched
      }
      expect(g.filter((v) => v !== MASK)).toHaveLength(step + 1);
    });
  });

  test('low_confidence commits the most confident positions first', async () => {
    const conf = [1, 8, 3, 6, 2, 7, 4, 5]; // order by confidence: 1,5,3,7,6,2,4,0
    const order: number[] = [];
    await sampleDiffusion(opts({ logits: targetModel(conf), steps: 8, onStep: (_t, _s, info) => order.push(...info.committed.map((p) => p - PROMPT.length)) }));
    expect(order).toEqual([1, 5, 3, 7, 6, 2, 4, 0]);
    // Two per step: the two most confident each time.
    const pairs: number[][] = [];
    await sampleDiffusion(opts({ logits: targetModel(conf), steps: 4, onStep: (_t, _s, info) => pairs.push(info.committed.map((p) => p - PROMPT.length).sort()) }));
    expect(pairs).toEqual([[1, 5], [3, 7], [2, 6], [0, 4]]);
  });

  test('random remasking: reproducible by seed, order depends on it', async () => {
    const run = async (seed: number) => {
      const order: number[] = [];
      await sampleDiffusion(opts({ remasking: 'random', seed, onStep: (_t, _s, i) => order.push(...i.committed) }));
      return order;
    };
    const a = await run(5);
    expect(await run(5)).toEqual(a);
    const others = await Promise.all([6, 7, 8].map(run));
    expect(others.some((o) => o.join() !== a.join())).toBe(true);
  });

  test('temperature > 0 samples x0 (Gumbel-max), reproducibly', async () => {
    // Flat logits over tokens 0..8 (mask excluded): samples vary, never the mask.
    const flat: LogitsFn = async (_t, rows, seqLen) => {
      const out = new Float32Array(rows * seqLen * V);
      for (let p = 0; p < seqLen; p++) out[p * V + MASK] = 50;
      return out;
    };
    const a = await sampleDiffusion(opts({ logits: flat, temperature: 1, seed: 3, genLength: 12, blockLength: 12, steps: 4 }));
    const b = await sampleDiffusion(opts({ logits: flat, temperature: 1, seed: 3, genLength: 12, blockLength: 12, steps: 4 }));
    expect(a).toEqual(b);
    const g = gen(a);
    expect(g.includes(MASK)).toBe(false);
    expect(new Set(g).size).toBeGreaterThan(2);
    // temperature 0 with flat logits: argmax ties to the lowest id.
    expect(gen(await sampleDiffusion(opts({ logits: flat, genLength: 4, blockLength: 4, steps: 2 })))).toEqual([0, 0, 0, 0]);
  });

  test('the model sees prompt + masked span as one row of prompt + genLength', async () => {
    const calls: Int32Array[] = [];
    await sampleDiffusion(opts({ logits: targetModel(undefined, calls), steps: 2 }));
    expect(calls).toHaveLength(2);
    expect(Array.from(calls[0]!)).toEqual([...PROMPT, ...Array(8).fill(MASK)]);
  });

  test('bad options give MdlmErrors naming the option', async () => {
    expect(await mdlmError(() => sampleDiffusion(opts({ blockLength: 3 })))).toMatch(/genLength 8 is not a multiple of blockLength 3/);
    expect(await mdlmError(() => sampleDiffusion(opts({ blockLength: 16 })))).toMatch(/blockLength 16/);
    expect(await mdlmError(() => sampleDiffusion(opts({ blockLength: 2, steps: 2 })))).toMatch(/steps 2 .*number of blocks 4/);
    expect(await mdlmError(() => sampleDiffusion(opts({ blockLength: 2, steps: 6 })))).toMatch(/steps 6/);
    expect(await mdlmError(() => sampleDiffusion(opts({ seqLen: 9 })))).toMatch(/prompt \(2 tokens\) \+ genLength \(8\) = 10 exceeds seqLen 9/);
    expect(await mdlmError(() => sampleDiffusion(opts({ temperature: -1 })))).toMatch(/temperature is -1/);
    expect(await mdlmError(() => sampleDiffusion(opts({ remasking: 'top' as never })))).toMatch(/remasking is "top"/);
    expect(await mdlmError(() => sampleDiffusion(opts({ maskId: V })))).toMatch(/maskId is 10/);
    expect(await mdlmError(() => sampleDiffusion(opts({ genLength: 0 })))).toMatch(/genLength/);
    expect(await mdlmError(() => sampleDiffusion(opts({ prompt: [1, -2] })))).toMatch(/prompt\[1\] is -2/);
    const short: LogitsFn = async () => new Float32Array(5);
    expect(await mdlmError(() => sampleDiffusion(opts({ logits: short })), 'BAD_SHAPE')).toMatch(/returned 5 floats/);
  });
});
