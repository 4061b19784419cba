import { mkdtempSync, writeFileSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { MdlmError } from '../../src/errors.js';
import { loadTokenizer, tokenizerFromFiles, type Tokenizer } from '../../src/data/tokenizer.js';

function writeFiles(dir: string, files: Record<string, string | Uint8Array>): void {
  mkdirSync(dir, { recursive: true });
  for (const [k, v] of Object.entries(files)) writeFileSync(join(dir, k), v);
}

const tmp = () => mkdtempSync(join(tmpdir(), 'mdlm-tok-'));

/** A tiny WordLevel tokenizer.json with no mask and no EOS: mdlm must add both. */
function wordLevelJson(extra: { content: string; id: number }[] = []) {
  return {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: [
      { id: 0, content: '[UNK]', single_word: false, lstrip: false, rstrip: false, normalized: false, special: true },
      ...extra.map((e) => ({ ...e, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true })),
    ],
    normalizer: { type: 'Lowercase' },
    pre_tokenizer: { type: 'Whitespace' },
    post_processor: null,
    decoder: null,
    model: { type: 'WordLevel', vocab: { '[UNK]': 0, the: 1, cat: 2, sat: 3, '.': 4, ...Object.fromEntries(extra.map((e) => [e.content, e.id])) }, unk_token: '[UNK]' },
  };
}

describe('byte tokenizer', () => {
  it('round-trips UTF-8 and has EOS/MASK/PAD after the 256 bytes', async () => {
    const t = await loadTokenizer('byte');
    expect([t.vocabSize, t.eosId, t.maskId, t.padId]).toEqual([259, 256, 257, 258]);
    const s = 'héllo, wörld — 你好 🙂';
    const ids = t.encode(s);
    expect(ids.length).toBe(new TextEncoder().encode(s).length);
    expect(Math.max(...ids)).toBeLessThan(256);
    expect(t.decode(ids)).toBe(s);
    expect(t.decode([104, 105, 257, 256])).toBe('hi[MASK]<|endoftext|>');
  });

  it('reloads from the descriptor its files() writes', async () => {
    const t = await loadTokenizer('byte');
    const dir = tmp();
    writeFiles(dir, t.files());
    const r = await loadTokenizer(dir);
    expect(r.name).toBe('byte');
    expect(r.encode('abc')).toEqual([97, 98, 99]);
  });
});

describe('gpt2 tokenizer', () => {
  it('gives the known GPT-2 ids, EOS 50256 and MASK 50257', async () => {
    const t = await loadTokenizer('gpt2');
    expect(t.encode('Hello world')).toEqual([15496, 995]);
    expect(t.encode(' the')).toEqual([262]);
    expect([t.vocabSize, t.eosId, t.maskId]).toEqual([50258, 50256, 50257]);
    expect(t.decode([15496, 995, 50257, 50256])).toBe('Hello world[MASK]<|endoftext|>');
    const s = 'Masked diffusion, über alles: 3.14159!\n\tTabs & spaces.';
    expect(t.decode(t.encode(s))).toBe(s);
    // literal special-token text in data is ordinary text, never the EOS id
    expect(t.encode('a<|endoftext|>b')).not.toContain(50256);
  });

  it('reloads from a directory holding its files()', async () => {
    const t = await loadTokenizer('gpt2');
    const dir = tmp();
    writeFiles(dir, t.files());
    const r = await loadTokenizer(dir);
    expect(r.name).toBe('gpt2');
    expect(r.encode('Hello world')).toEqual([15496, 995]);
  });
});

describe('Hugging Face tokenizer.json', () => {
  it('loads a hand-written WordLevel tokenizer, adds EOS and MASK, encodes and reloads', async () => {
    const dir = tmp();
    writeFileSync(join(dir, 'tokenizer.json'), JSON.stringify(wordLevelJson()));
    const t = (await loadTokenizer(join(dir, 'tokenizer.json'))) as Tokenizer & { added: string[] };
    expect(t.encode('The cat sat.')).toEqual([1, 2, 3, 4]);
    expect(t.encode('the dog')).toEqual([1, 0]); // unknown word → [UNK]
    expect(t.added).toEqual(['<|endoftext|>', '[MASK]']);
    expect([t.eosId, t.maskId, t.vocabSize]).toEqual([5, 6, 7]);
    expect(t.decode([1, 2])).toContain('cat');
    const dir2 = tmp();
    writeFiles(dir2, t.files());
    const r = await loadTokenizer(dir2);
    expect([r.eosId, r.maskId, r.vocabSize]).toEqual([5, 6, 7]);
    expect(r.encode('the cat')).toEqual([1, 2]);
  });

  it('rebuilds from in-memory files() without the file system (browser path)', async () => {
    const dir = tmp();
    writeFileSync(join(dir, 'tokenizer.json'), JSON.stringify(wordLevelJson()));
    const t = await loadTokenizer(dir);
    const bytes = Object.fromEntries(Object.entries(t.files()).map(([k, v]) => [k, typeof v === 'string' ? new TextEncoder().encode(v) : v]));
    const r = await tokenizerFromFiles(bytes);
    expect([r.eosId, r.maskId, r.vocabSize]).toEqual([5, 6, 7]);
    expect(r.encode('cat sat')).toEqual([2, 3]);
    expect((await tokenizerFromFiles((await loadTokenizer('byte')).files())).name).toBe('byte');
    await expect(tokenizerFromFiles({})).rejects.toMatchObject({ code: 'NOT_FOUND' });
  });

  it('uses existing <mask> and </s> tokens instead of adding', async () => {
    const dir = tmp();
    writeFileSync(join(dir, 'tokenizer.json'), JSON.stringify(wordLevelJson([{ content: '</s>', id: 5 }, { content: '<mask>', id: 6 }, { content: '<pad>', id: 7 }])));
    const t = await loadTokenizer(dir);
    expect([t.eosId, t.maskId, t.padId, t.vocabSize]).toEqual([5, 6, 7, 8]);
  });

  it('loads a hand-written byte-level BPE with merges and keeps its own <|endoftext|> as EOS', async () => {
    const tj = {
      version: '1.0', truncation: null, padding: null,
      added_tokens: [{ id: 12, content: '<|endoftext|>', single_word: false, lstrip: false, rstrip: false, normalized: false, special: true }],
      normalizer: null,
      pre_tokenizer: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true },
      post_processor: null,
      decoder: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true },
      model: {
        type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null, end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, ignore_merges: false,
        vocab: { h: 0, e: 1, l: 2, o: 3, 'Ġ': 4, w: 5, r: 6, d: 7, he: 8, ll: 9, hell: 10, hello: 11 },
        merges: ['h e', 'l l', 'he ll', 'hell o'],
      },
    };
    const dir = tmp();
    writeFileSync(join(dir, 'tokenizer.json'), JSON.stringify(tj));
    const t = await loadTokenizer(dir);
    expect(t.encode('hello world')).toEqual([11, 4, 5, 3, 6, 2, 7]);
    expect(t.decode([11, 4, 5, 3, 6, 2, 7])).toBe('hello world');
    expect([t.eosId, t.maskId, t.vocabSize]).toEqual([12, 13, 14]);
  });

  it('rejects unknown specs and non-tokenizer JSON with MdlmError', async () => {
    await expect(loadTokenizer('no/such/tokenizer.json')).rejects.toMatchObject({ code: 'NOT_FOUND' });
    const dir = tmp();
    writeFileSync(join(dir, 'tokenizer.json'), '{"hello": 1}');
    await expect(loadTokenizer(dir)).rejects.toBeInstanceOf(MdlmError);
    await expect(loadTokenizer(dir)).rejects.toMatchObject({ code: 'BAD_FILE' });
    writeFileSync(join(dir, 'tokenizer.json'), '{not json');
    await expect(loadTokenizer(dir)).rejects.toMatchObject({ code: 'BAD_FILE' });
    await expect(loadTokenizer(tmp())).rejects.toMatchObject({ code: 'NOT_FOUND' });
  });
});
