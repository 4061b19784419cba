/** The train/val split: a seeded draw per document, topped up to a least number of val tokens on small corpora. */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { CpuBackend } from '../../src/backend/cpu/cpu.js';
import { configFields, resolveConfig } from '../../src/config/load.js';
import { dataCommand } from '../../src/cli/data.js';
import { openPreparedData } from '../../src/data/dataset.js';
import { evalBatchCount } from '../../src/data/loader.js';
import { DEFAULT_VAL_FRACTION, prepareData } from '../../src/data/prepare.js';
import { DEFAULT_VAL_TOKENS, isValDocument, splitDraw } from '../../src/data/split.js';
import { openShard } from '../../src/data/shard.js';
import { openRunData } from '../../src/train/data.js';
import { Trainer } from '../../src/train/trainer.js';

const tmp = () => mkdtempSync(join(tmpdir(), 'mdlm-split-'));

/** `n` documents of made-up words, about `bytes` bytes each. */
function corpus(n: number, bytes: number): string[] {
  const words = ['the', 'cat', 'sat', 'on', 'a', 'mat', 'and', 'dog', 'ran', 'to', 'house', 'by', 'river', 'over', 'quick', 'brown', 'fox'];
  let s = 1;
  return Array.from({ length: n }, () => {
    const w: string[] = [];
    for (let len = 0; len < bytes; ) {
      s = (s * 1103515245 + 12345) % 2147483648;
      const word = words[s % words.length]!;
      w.push(word);
      len += word.length + 1;
    }
    return w.join(' ') + '.';
  });
}

/** The documents of a byte-tokenised shard, as text. */
function shardDocs(path: string): string[] {
  const ids = Array.from(openShard(path).tokens());
  const out: string[] = [];
  let cur: number[] = [];
  for (const t of ids) {
    if (t === 256) {
      out.push(Buffer.from(cur).toString('utf8'));
      cur = [];
    } else cur.push(t);
  }
  return out;
}

/** The split the documentation describes, computed from the draws. */
function expectedVal(docs: string[], seed: number, valFraction: number, valTokens: number): Set<number> {
  const tokens = docs.map((d) => Buffer.byteLength(d) + 1);
  const total = tokens.reduce((a, b) => a + b, 0);
  const val = new Set(docs.map((_, i) => i).filter((i) => isValDocument(seed, i, valFraction)));
  let have = [...val].reduce((a, i) => a + tokens[i]!, 0);
  const want = Math.min(valTokens, Math.floor(total / 10));
  const rest = docs.map((_, i) => i).filter((i) => !val.has(i)).sort((a, b) => splitDraw(seed, a) - splitDraw(seed, b) || a - b);
  for (const i of rest) {
    if ((val.size > 0 && have >= want) || docs.length - val.size <= 1) break;
    val.add(i);
    have += tokens[i]!;
  }
  return val;
}

describe('train/val split', () => {
  it('gives a 300 KB corpus at the default fraction enough val tokens for evaluation (a tenth of the data at most)', async () => {
    const dir = tmp();
    const docs = corpus(200, 1500);
    writeFileSync(join(dir, 'c.txt'), docs.join('\n\n') + '\n');
    const meta = await prepareData({ input: join(dir, 'c.txt'), tokenizer: 'byte', out: join(dir, 'o') });
    const total = meta.train.tokens + meta.val.tokens;
    expect(meta.split).toEqual({ valFraction: DEFAULT_VAL_FRACTION, valTokens: DEFAULT_VAL_TOKENS, seed: 0 });
    // The fraction alone draws a document or two; the minimum (a tenth of 300K tokens) takes over.
    expect(docs.filter((_, i) => isValDocument(0, i, DEFAULT_VAL_FRACTION)).length).toBeLessThan(5);
    expect(meta.val.tokens).toBeGreaterThanOrEqual(Math.floor(total / 10));
    expect(meta.val.tokens).toBeLessThan(Math.floor(total / 10) + 1600);
    // Both shards keep input order, every document once, and val is the documented set.
    const val = expectedVal(docs, 0, DEFAULT_VAL_FRACTION, DEFAULT_VAL_TOKENS);
    expect(shardDocs(join(dir, 'o', 'val.bin'))).toEqual(docs.filter((_, i) => val.has(i)));
    expect(shardDocs(join(dir, 'o', 'train.bin'))).toEqual(docs.filter((_, i) => !val.has(i)));
    // What the nano and small presets evaluate fits: nano all 8 batches, small at least one.
    const data = await openPreparedData(join(dir, 'o'));
    expect(evalBatchCount(data.val, { seqLen: 64, batchSize: 16, maxBatches: 8 })).toBe(8);
    expect(evalBatchCount(data.val, { seqLen: 256, batchSize: 32 })).toBeGreaterThanOrEqual(1);
  });

  it('--val-tokens sets the minimum; a large fraction is the plain per-document draw', async () => {
    const dir = tmp();
    const docs = corpus(60, 300);
    writeFileSync(join(dir, 'c.txt'), docs.join('\n\n'));
    const cmd = dataCommand();
    cmd.exitOverride();
    const write = process.stdout.write;
    process.stdout.write = (() => true) as typeof process.stdout.write;
    try {
      await cmd.parseAsync(['prepare', '--input', join(dir, 'c.txt'), '--tokenizer', 'byte', '--out', join(dir, 'a'), '--val-tokens', '1000', '--seed', '3', '--no-progress'], { from: 'user' });
    } finally {
      process.stdout.write = write;
    }
    const a = await openPreparedData(join(dir, 'a'));
    expect(a.meta.split).toEqual({ valFraction: DEFAULT_VAL_FRACTION, valTokens: 1000, seed: 3 });
    expect(a.meta.val.tokens).toBeGreaterThanOrEqual(1000);
    const val = expectedVal(docs, 3, DEFAULT_VAL_FRACTION, 1000);
    expect(shardDocs(join(dir, 'a', 'val.bin'))).toEqual(docs.filter((_, i) => val.has(i)));
    const b = await prepareData({ input: join(dir, 'c.txt'), tokenizer: 'byte', out: join(dir, 'b'), valFraction: 0.3, seed: 3 });
    expect(shardDocs(join(dir, 'b', 'val.bin'))).toEqual(docs.filter((_, i) => isValDocument(3, i, 0.3)));
    expect(b.val.tokens).toBeGreaterThan(Math.floor((b.train.tokens + b.val.tokens) / 10));
  });

  it('train keeps a document even when every one is drawn for val', async () => {
    const dir = tmp();
    const docs = ['alpha', 'beta', 'gamma'];
    writeFileSync(join(dir, 'c.txt'), docs.join('\n\n'));
    const meta = await prepareData({ input: join(dir, 'c.txt'), tokenizer: 'byte', out: join(dir, 'o'), valFraction: 0.999999 });
    expect([meta.train.documents, meta.val.documents]).toEqual([1, 2]);
    const largest = [0, 1, 2].reduce((best, i) => (splitDraw(0, i) > splitDraw(0, best) ? i : best), 0);
    expect(shardDocs(join(dir, 'o', 'train.bin'))).toEqual([docs[largest]]);
  });

  it('a run on a small text corpus with default settings trains and evaluates; a val split too small names real options', async () => {
    const dir = tmp();
    writeFileSync(join(dir, 'c.txt'), corpus(100, 1000).join('\n\n'));
    const config = resolveConfig({
      preset: 'nano',
      overrides: { 'data.path': join(dir, 'c.txt'), out: join(dir, 'run'), backend: 'cpu', 'train.steps': '1', 'train.evalBatches': '2', 'model.nLayers': '1' },
    });
    const data = await openRunData(config, () => {});
    const t = new Trainer({ config, backend: new CpuBackend(), train: data.train, val: data.val, tokenizer: data.tokenizer, resume: false, log: () => {} });
    try {
      expect((await t.run()).lastEval?.val_tokens).toBeGreaterThan(0);
    } finally {
      t.destroy();
    }
    // Too few validation tokens for one batch: the message names options train and data prepare have.
    let message = '';
    try {
      evalBatchCount(data.val!, { seqLen: 1024, batchSize: 64 });
    } catch (e) {
      message = (e as Error).message;
    }
    expect(message).toMatch(/--train\.batchSize/);
    const fields = new Set(configFields().map((f) => f.path));
    const prepareFlags = new Set(dataCommand().commands.find((c) => c.name() === 'prepare')!.options.map((o) => o.long));
    const named = message.match(/--[a-zA-Z.-]+/g) ?? [];
    expect(named.length).toBeGreaterThan(0);
    for (const flag of named) expect(fields.has(flag.slice(2)) || prepareFlags.has(flag), flag).toBe(true);
  });
});
