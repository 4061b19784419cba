import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { MdlmError } from '../../src/errors.js';
import { openShard, writeShard, type TokenShard } from '../../src/data/shard.js';
import { createLoader, evalBatchCount, evalBatches, type Batch } from '../../src/data/loader.js';

const EOS = 0;
let shard: TokenShard; // 60 docs of 1..29 tokens, ids 1..999, EOS 0
let all: Int32Array;

beforeAll(async () => {
  const docs: number[][] = [];
  let x = 1;
  for (let d = 0; d < 60; d++) docs.push(Array.from({ length: 1 + ((d * 17) % 29) }, () => (x = (x * 37 + 11) % 999) + 1));
  const path = join(mkdtempSync(join(tmpdir(), 'mdlm-loader-')), 'train.bin');
  await writeShard(path, docs, { vocabSize: 1000, eosId: EOS });
  shard = openShard(path);
  all = shard.tokens();
});

const key = (b: Batch) => Array.from(b.starts).join(',');

describe('batch loader', () => {
  it('window mode: rows are source windows, targets the next tokens, positions 0..T-1', () => {
    const T = 16, B = 4;
    const l = createLoader(shard, { seqLen: T, batchSize: B, seed: 3 });
    for (let k = 0; k < 5; k++) {
      const b = l.next();
      expect(b.tokens.length).toBe(B * T);
      for (let r = 0; r < B; r++) {
        const s = b.starts[r]!;
        expect(Array.from(b.tokens.subarray(r * T, r * T + T))).toEqual(Array.from(all.subarray(s, s + T)));
        expect(Array.from(b.targets.subarray(r * T, r * T + T))).toEqual(Array.from(all.subarray(s + 1, s + T + 1)));
        expect(Array.from(b.positions.subarray(r * T, r * T + T))).toEqual([...Array(T).keys()]);
        expect(b.segIds.every((v) => v === 0)).toBe(true);
      }
    }
  });

  it('is deterministic in the seed and visits each window of an epoch once', () => {
    const opts = { seqLen: 8, batchSize: 3, seed: 11 };
    const a = createLoader(shard, opts), b = createLoader(shard, opts), c = createLoader(shard, { ...opts, seed: 12 });
    const seqA = Array.from({ length: a.batchesPerEpoch }, () => a.next());
    const seqB = Array.from({ length: a.batchesPerEpoch }, () => b.next());
    expect(seqA.map(key)).toEqual(seqB.map(key));
    expect(seqA.map(key)).not.toEqual(Array.from({ length: a.batchesPerEpoch }, () => key(c.next())));
    const starts = seqA.flatMap((x) => Array.from(x.starts));
    expect(new Set(starts).size).toBe(starts.length);
    const phase = starts[0]! % 8;
    expect(starts.every((s) => s % 8 === phase && s + 9 <= all.length)).toBe(true);
    // the next epoch is a different order
    const next = a.next();
    expect(next.cursor).toEqual({ epoch: 1, index: 0 });
    expect(key(next)).not.toEqual(key(seqA[0]!));
  });

  it('resuming from state() yields exactly the batches of an uninterrupted run, across epochs', () => {
    for (const mode of ['window', 'packed'] as const) {
      const opts = { seqLen: 12, batchSize: 5, seed: 7, mode };
      const ref = createLoader(shard, opts);
      const total = ref.batchesPerEpoch * 2 + 3;
      const uninterrupted = Array.from({ length: total }, () => ref.next());
      for (const cut of [1, ref.batchesPerEpoch, ref.batchesPerEpoch + 2]) {
        const first = createLoader(shard, opts);
        for (let i = 0; i < cut; i++) first.next();
        const saved = JSON.parse(JSON.stringify(first.state()));
        const resumed = createLoader(shard, opts);
        resumed.restore(saved);
        for (let i = cut; i < total; i++) {
          const b = resumed.next();
          const u = uninterrupted[i]!;
          expect(b.cursor).toEqual(u.cursor);
          expect(Array.from(b.tokens)).toEqual(Array.from(u.tokens));
          expect(Array.from(b.segIds)).toEqual(Array.from(u.segIds));
        }
      }
    }
  });

  it('gives different ranks disjoint windows', () => {
    const W = 3;
    const loaders = Array.from({ length: W }, (_, rank) => createLoader(shard, { seqLen: 8, batchSize: 2, seed: 5, rank, worldSize: W }));
    const per = loaders[0]!.batchesPerEpoch;
    const seen = new Set<number>();
    for (let g = 0; g < per; g++) {
      for (const l of loaders) for (const s of l.next().starts) {
        expect(seen.has(s)).toBe(false);
        seen.add(s);
      }
    }
    expect(seen.size).toBe(per * 2 * W);
  });

  it('packed mode: segment ids and positions restart after each EOS, cross-document targets are -1', () => {
    const T = 40;
    const l = createLoader(shard, { seqLen: T, batchSize: 2, seed: 1, mode: 'packed' });
    const b = l.next();
    for (let r = 0; r < 2; r++) {
      let seg = 0, pos = 0;
      for (let j = 0; j < T; j++) {
        const i = r * T + j;
        if (j > 0 && b.tokens[i - 1] === EOS) { seg++; pos = 0; }
        expect(b.segIds[i]).toBe(seg);
        expect(b.positions[i]).toBe(pos++);
        expect(b.targets[i]).toBe(b.tokens[i] === EOS ? -1 : all[b.starts[r]! + j + 1]);
      }
      expect(b.segIds[r * T + T - 1]).toBeGreaterThan(0); // docs are ≤ 30 tokens: a 40-token row spans two
    }
  });

  it('errors clearly on a too-short source, a too-large batch and a bad state', async () => {
    expect(() => createLoader(shard, { seqLen: all.length, batchSize: 1, seed: 0 })).toThrow(/fewer than \d+ \(model\.seqLen \+ 1\) needed for one window; lower --model\.seqLen/);
    expect(() => createLoader(shard, { seqLen: 64, batchSize: 1000, seed: 0 })).toThrow(/fewer than one global batch .*; lower --train\.batchSize or --model\.seqLen/);
    expect(() => createLoader(shard, { seqLen: 8, batchSize: 1, seed: 0, rank: 2, worldSize: 2 })).toThrow(MdlmError);
    const l = createLoader(shard, { seqLen: 8, batchSize: 1, seed: 0 });
    expect(() => l.restore({ epoch: 0, index: 1e9 })).toThrow(/exceeds/);
    expect(() => l.restore({ epoch: -1, index: 0 })).toThrow(MdlmError);
  });
});

describe('eval batches', () => {
  it('are a fixed, finite, in-order sequence of non-overlapping windows split across ranks', () => {
    const opts = { seqLen: 10, batchSize: 3 };
    const n = evalBatchCount(shard, opts);
    expect(n).toBe(Math.floor(Math.floor((all.length - 1) / 10) / 3));
    const a = [...evalBatches(shard, opts)], b = [...evalBatches(shard, opts)];
    expect(a.length).toBe(n);
    expect(a.map(key)).toEqual(b.map(key));
    expect(Array.from(a[1]!.starts)).toEqual([30, 40, 50]);
    const r0 = [...evalBatches(shard, { ...opts, worldSize: 2, rank: 0 })];
    const r1 = [...evalBatches(shard, { ...opts, worldSize: 2, rank: 1 })];
    expect(Array.from(r0[0]!.starts)).toEqual([0, 10, 20]);
    expect(Array.from(r1[0]!.starts)).toEqual([30, 40, 50]);
    expect([...evalBatches(shard, { ...opts, maxBatches: 2 })].length).toBe(2);
    expect(() => [...evalBatches(shard, { seqLen: 100, batchSize: 100 })]).toThrow(/fewer than one eval batch .*; lower --train\.batchSize or --model\.seqLen, or train on data prepared with more validation tokens \(mdlm data prepare --val-tokens N\)/);
  });
});
