import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { prepareData, type PrepareProgress } from '../../src/data/prepare.js';
import { isValDocument, splitDraw } from '../../src/data/split.js';
import { listInputFiles } from '../../src/data/text.js';
import { openShard } from '../../src/data/shard.js';
import { loadTokenizer } from '../../src/data/tokenizer.js';
import { dataCommand } from '../../src/cli/data.js';
import { openPreparedData } from '../../src/data/dataset.js';

const tmp = () => mkdtempSync(join(tmpdir(), 'mdlm-prep-'));

function decodeDocs(path: string, eos: number, decode: (ids: number[]) => string): string[] {
  const t = Array.from(openShard(path).tokens());
  const docs: string[] = [];
  let cur: number[] = [];
  for (const x of t) {
    if (x === eos) { docs.push(decode(cur)); cur = []; } else cur.push(x);
  }
  expect(cur).toEqual([]); // every document ends with EOS
  return docs;
}

describe('prepareData', () => {
  it('splits a .txt file at blank lines into train/val shards with meta.json and tokenizer files', async () => {
    const dir = tmp();
    const docs = Array.from({ length: 40 }, (_, i) => `Document ${i} line one.\nLine two of ${i}.`);
    writeFileSync(join(dir, 'in.txt'), docs.join('\n\n\n') + '\n');
    const out = join(dir, 'out');
    const events: PrepareProgress[] = [];
    const meta = await prepareData({ input: join(dir, 'in.txt'), tokenizer: 'byte', out, valFraction: 0.2, seed: 1, onProgress: (p) => events.push(p) });
    expect(readdirSync(out).sort()).toEqual(['meta.json', 'tokenizer.json', 'tokenizer_config.json', 'train.bin', 'val.bin']);
    expect(meta.train.documents + meta.val.documents).toBe(40);
    expect(meta.val.documents).toBeGreaterThanOrEqual(1);
    expect(JSON.parse(readFileSync(join(out, 'meta.json'), 'utf8'))).toMatchObject({ tokenizer: { spec: 'byte', vocabSize: 259, eosId: 256, maskId: 257 }, split: { valFraction: 0.2, seed: 1 } });
    const tok = await loadTokenizer(out);
    const dec = (ids: number[]) => tok.decode(ids);
    const train = decodeDocs(join(out, 'train.bin'), 256, dec), val = decodeDocs(join(out, 'val.bin'), 256, dec);
    // the split is the documented pure function of (seed, index), order is preserved
    expect(val).toEqual(docs.filter((_, i) => isValDocument(1, i, 0.2)));
    expect(train).toEqual(docs.filter((_, i) => !isValDocument(1, i, 0.2)));
    expect(events.at(-1)).toMatchObject({ unit: 'bytes', documents: 40 });
    expect(events.at(-1)!.done).toBe(events.at(-1)!.total);
    // same seed → same bytes
    const out2 = join(dir, 'out2');
    await prepareData({ input: join(dir, 'in.txt'), tokenizer: 'byte', out: out2, valFraction: 0.2, seed: 1 });
    expect(readFileSync(join(out2, 'val.bin')).equals(readFileSync(join(out, 'val.bin')))).toBe(true);
  });

  it('reads .jsonl with a custom field, directories recursively in sorted order, and keeps ≥1 val doc', async () => {
    const dir = tmp();
    mkdirSync(join(dir, 'b', 'c'), { recursive: true });
    writeFileSync(join(dir, 'b', 'c', 'z.jsonl'), '{"body":"third"}\n\n{"body":"fourth","id":4}\n');
    writeFileSync(join(dir, 'b', 'a.jsonl'), '{"body":"first"}\n{"body":"second"}\n');
    writeFileSync(join(dir, 'b', '.hidden.jsonl'), '{"body":"hidden"}\n');
    writeFileSync(join(dir, 'image.png'), Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13]));
    const listed = listInputFiles(dir);
    expect(listed.files.map((f) => f.slice(dir.length))).toEqual(['/b/a.jsonl', '/b/c/z.jsonl']);
    expect(listed.skipped.map((f) => f.slice(dir.length))).toEqual(['/image.png']);
    const out = join(dir, 'out');
    const meta = await prepareData({ input: dir, field: 'body', tokenizer: 'gpt2', out, valFraction: 0 });
    expect(meta.source).toMatchObject({ files: 2, skipped: ['image.png'] });
    expect([meta.train.documents, meta.val.documents]).toEqual([3, 1]);
    // With no document drawn for val, the one with the smallest draw goes there.
    const docs = ['first', 'second', 'third', 'fourth'];
    const least = docs.map((_, i) => splitDraw(0, i)).reduce((best, d, i, all) => (d < all[best]! ? i : best), 0);
    const tok = await loadTokenizer(out);
    expect(decodeDocs(join(out, 'train.bin'), 50256, (i) => tok.decode(i))).toEqual(docs.filter((_, i) => i !== least));
    expect(decodeDocs(join(out, 'val.bin'), 50256, (i) => tok.decode(i))).toEqual([docs[least]]);
    // A second prepare into the same directory leaves its output out of the walk.
    const again = await prepareData({ input: dir, field: 'body', tokenizer: 'gpt2', out, valFraction: 0 });
    expect(again.source).toMatchObject({ files: 2, skipped: ['image.png'] });
  });

  it('reports input mistakes with file and line', async () => {
    const dir = tmp();
    writeFileSync(join(dir, 'a.jsonl'), '{"text":"ok"}\n{"txt":"oops"}\n');
    await expect(prepareData({ input: join(dir, 'a.jsonl'), tokenizer: 'byte', out: join(dir, 'o') })).rejects.toMatchObject({ code: 'BAD_FILE', message: expect.stringMatching(/a\.jsonl:2: field "text" is missing \(keys: txt\)/) });
    writeFileSync(join(dir, 'b.jsonl'), '{"text":"ok"}\n{broken\n');
    await expect(prepareData({ input: join(dir, 'b.jsonl'), tokenizer: 'byte', out: join(dir, 'o') })).rejects.toMatchObject({ message: expect.stringMatching(/b\.jsonl:2: not valid JSON/) });
    writeFileSync(join(dir, 'one.txt'), 'just one document\nno blank line\n');
    await expect(prepareData({ input: join(dir, 'one.txt'), tokenizer: 'byte', out: join(dir, 'o') })).rejects.toMatchObject({ code: 'BAD_ARGUMENT', message: expect.stringMatching(/at least 2/) });
    expect(existsSync(join(dir, 'o'))).toBe(false); // nothing that looks like a result, not even the directory made for it
    await expect(prepareData({ input: join(dir, 'missing'), tokenizer: 'byte', out: join(dir, 'o') })).rejects.toMatchObject({ code: 'NOT_FOUND' });
  });

  it('uses the Brown corpus when no input is given (via the CLI command)', async () => {
    const out = join(tmp(), 'brown');
    const cmd = dataCommand();
    cmd.exitOverride();
    const write = process.stdout.write;
    let printed = '';
    process.stdout.write = ((s: string) => ((printed += s), true)) as typeof process.stdout.write;
    try {
      await cmd.parseAsync(['prepare', '--tokenizer', 'byte', '--out', out, '--val-fraction', '0.01', '--seed', '2', '--no-progress'], { from: 'user' });
    } finally {
      process.stdout.write = write;
    }
    const meta = JSON.parse(readFileSync(join(out, 'meta.json'), 'utf8'));
    expect(meta.source.input).toBe('brown');
    expect(meta.train.documents + meta.val.documents).toBe(500);
    expect(meta.val.documents).toBeGreaterThanOrEqual(1);
    expect(printed).toMatch(/train\.bin: \d+ documents/);
    const data = await openPreparedData(out);
    expect(data.val.documents).toBe(meta.val.documents);
    expect(data.tokenizer.name).toBe('byte');
    expect(data.train.length).toBe(meta.train.tokens);
    await expect(openPreparedData(tmp())).rejects.toMatchObject({ code: 'NOT_FOUND', message: expect.stringMatching(/no meta\.json/) });
  });
});
