import { mkdtempSync, writeFileSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Tokenizer as HfCore } from '@huggingface/tokenizers';
import { describe, expect, it } from 'vitest';
import { brownDocuments } from '../../src/data/brown.js';
import { MdlmError } from '../../src/errors.js';
import { loadTokenizer, tokenizerFromFiles, type Tokenizer } from '../../src/data/tokenizer.js';

function writeFiles(dir: string, files: Record<string, string | Uint8Array>): void {
  mkdirSync(dir, { recursive: true });
  for (const [k, v] of Object.entries(files)) writeFileSync(join(dir, k), v);
}

const tmp = () => mkdtempSync(join(tmpdir(), 'mdlm-tok-'));

/** Text that exercises a byte-level BPE: contractions, digits, whitespace runs, punctuation, accents, CJK, emoji (ZWJ sequences), RTL, combining marks. */
const VARIED = [
  "Hello world! It's 3.14159, isn't it? I'll say 12345 — and you'd've said 'no'.",
  '  leading spaces,\ttabs\t\tand\n\nnew lines   \n trailing   ',
  'héllo wörld, ÆØÅ æøå, naïve café, Ωμέγα, Привет мир',
  '你好，世界。日本語のテキスト、한국어 텍스트',
  '🙂 👩‍👩‍👧 🇫🇷 ☕️ e\u0301 a\u030a',
  'مرحبا بالعالم שלום עולם',
  'x=1;y=[2,3];z={"k":"v"} <div class="a">&amp;</div> C:\\path\\to',
  '\u0000\u0001\u007f\u00ad\u200b\ufeff',
];

/** The ids the tokenizer.json and tokenizer_config.json that `files()` wrote give when @huggingface/tokenizers loads them as transformers would. */
function hfIds(files: Record<string, string | Uint8Array>, text: string): number[] {
  const json = JSON.parse(files['tokenizer.json'] as string) as object;
  const config = JSON.parse(files['tokenizer_config.json'] as string) as object;
  return new HfCore(json, config).encode(text).ids;
}

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
    expect(t.withMaskToken()).toBe(t);
    const s = 'héllo, wörld — 你好 🙂';
    const ids = t.encode(s);
    expect(ids.length).toBe(new TextEncoder().encode(s).length);
    expect(Math.max(...ids)).toBeLessThan(256);
    expect(t.decode(ids)).toBe(s);
    expect(t.decode([104, 105, 257, 256])).toBe('hi[MASK]<|endoftext|>');
  });

  it('writes a standard tokenizer.json whose ids are its own, and a tokenizer_config.json naming the special tokens', async () => {
    const t = await loadTokenizer('byte');
    const files = t.files();
    for (const text of [...VARIED, brownDocuments().join('\n\n').slice(0, 20000)]) expect(hfIds(files, text), text.slice(0, 40)).toEqual(t.encode(text));
    const json = JSON.parse(files['tokenizer.json'] as string) as { added_tokens: { id: number; content: string; special: boolean }[]; model: { type: string; vocab: Record<string, number> } };
    expect(json.model.type).toBe('BPE');
    expect(Object.keys(json.model.vocab)).toHaveLength(256);
    expect(json.added_tokens.map((a) => [a.id, a.content, a.special])).toEqual([[256, '<|endoftext|>', true], [257, '[MASK]', true], [258, '<pad>', true]]);
    expect(JSON.parse(files['tokenizer_config.json'] as string)).toMatchObject({ tokenizer_class: 'PreTrainedTokenizerFast', eos_token: '<|endoftext|>', mask_token: '[MASK]', pad_token: '<pad>' });
    const core = new HfCore(JSON.parse(files['tokenizer.json'] as string) as object, {});
    expect(core.decode(t.encode(VARIED[2]!), { skip_special_tokens: false })).toBe(VARIED[2]);
  });

  it('reloads from the files() it writes, by its own implementation', async () => {
    const t = await loadTokenizer('byte');
    const dir = tmp();
    writeFiles(dir, t.files());
    const r = await loadTokenizer(dir);
    expect(r.name).toBe('byte');
    expect([r.vocabSize, r.maskId]).toEqual([259, 257]);
    expect(r.encode('abc')).toEqual([97, 98, 99]);
  });
});

describe('gpt2 tokenizer', () => {
  it('gives the known GPT-2 ids and EOS 50256; [MASK] only when asked for, as 50257', async () => {
    const t = await loadTokenizer('gpt2');
    expect(t.encode('Hello world')).toEqual([15496, 995]);
    expect(t.encode(' the')).toEqual([262]);
    expect([t.vocabSize, t.eosId, t.maskId]).toEqual([50257, 50256, undefined]);
    const m = t.withMaskToken();
    expect([m.vocabSize, m.eosId, m.maskId]).toEqual([50258, 50256, 50257]);
    expect(m.withMaskToken()).toBe(m);
    expect(m.decode([15496, 995, 50257, 50256])).toBe('Hello world[MASK]<|endoftext|>');
    const s = 'Masked diffusion, über alles: 3.14159!\n\tTabs & spaces.';
    expect(t.decode(t.encode(s))).toBe(s);
    // literal special-token text in data is ordinary text, never the EOS or [MASK] id
    expect(t.encode('a<|endoftext|>b')).not.toContain(50256);
    expect(m.encode('a[MASK]b')).not.toContain(50257);
  });

  it("writes GPT-2's tokenizer.json (merges rebuilt from the ranks): the same ids as js-tiktoken on varied text", async () => {
    const t = await loadTokenizer('gpt2');
    const files = t.files();
    const json = JSON.parse(files['tokenizer.json'] as string) as { added_tokens: { id: number; content: string }[]; model: { vocab: Record<string, number>; merges: string[] } };
    expect(Object.keys(json.model.vocab)).toHaveLength(50257);
    expect(json.model.merges).toHaveLength(50000);
    expect(json.model.merges.slice(0, 3)).toEqual(['Ġ t', 'Ġ a', 'h e']); // GPT-2's merges.txt begins so
    expect(json.added_tokens.map((a) => [a.id, a.content])).toEqual([[50256, '<|endoftext|>']]);
    const core = new HfCore(json, JSON.parse(files['tokenizer_config.json'] as string) as object);
    for (const text of [...VARIED, brownDocuments().join('\n\n').slice(0, 60000)]) expect(core.encode(text).ids, text.slice(0, 40)).toEqual(t.encode(text));
    expect(core.decode(t.encode(VARIED[3]!), { skip_special_tokens: false })).toBe(VARIED[3]);
    const masked = t.withMaskToken().files();
    expect((JSON.parse(masked['tokenizer.json'] as string) as { added_tokens: { id: number; content: string }[] }).added_tokens.map((a) => [a.id, a.content])).toEqual([[50256, '<|endoftext|>'], [50257, '[MASK]']]);
    expect(JSON.parse(masked['tokenizer_config.json'] as string)).toMatchObject({ tokenizer_class: 'PreTrainedTokenizerFast', eos_token: '<|endoftext|>', mask_token: '[MASK]' });
    expect(JSON.parse(files['tokenizer_config.json'] as string)).not.toHaveProperty('mask_token');
  });

  it('reloads from a directory holding its files(), with or without the [MASK]', async () => {
    const t = await loadTokenizer('gpt2');
    for (const tok of [t, t.withMaskToken()]) {
      const dir = tmp();
      writeFiles(dir, tok.files());
      const r = await loadTokenizer(dir);
      expect([r.name, r.vocabSize, r.maskId]).toEqual(['gpt2', tok.vocabSize, tok.maskId]);
      expect(r.encode('Hello world')).toEqual([15496, 995]);
    }
  });

  it('reads the descriptor older versions wrote (GPT-2 with its [MASK] as 50257)', async () => {
    const dir = tmp();
    writeFiles(dir, { 'tokenizer_config.json': JSON.stringify({ mdlm_tokenizer: 'gpt2', vocab_size: 50258, eos_token_id: 50256, mask_token_id: 50257, eos_token: '<|endoftext|>', mask_token: '[MASK]' }) });
    const r = await loadTokenizer(dir);
    expect([r.name, r.vocabSize, r.eosId, r.maskId]).toEqual(['gpt2', 50258, 50256, 50257]);
    writeFiles(dir, { 'tokenizer_config.json': JSON.stringify({ mdlm_tokenizer: 'byte', vocab_size: 300, mask_token: '[MASK]' }) });
    await expect(loadTokenizer(dir)).rejects.toMatchObject({ code: 'BAD_FILE' });
  });
});

describe('Hugging Face tokenizer.json', () => {
  it('loads a hand-written WordLevel tokenizer, adds EOS (and [MASK] only when asked), encodes and reloads', async () => {
    const dir = tmp();
    writeFileSync(join(dir, 'tokenizer.json'), JSON.stringify(wordLevelJson()));
    const t = (await loadTokenizer(join(dir, 'tokenizer.json'))) as Tokenizer & { added: string[] };
    expect(t.encode('The cat sat.')).toEqual([1, 2, 3, 4]);
    expect(t.encode('the dog')).toEqual([1, 0]); // unknown word → [UNK]
    expect(t.added).toEqual(['<|endoftext|>']);
    expect([t.eosId, t.maskId, t.vocabSize]).toEqual([5, undefined, 6]);
    const m = t.withMaskToken() as Tokenizer & { added: string[] };
    expect(m.added).toEqual(['<|endoftext|>', '[MASK]']);
    expect([m.eosId, m.maskId, m.vocabSize]).toEqual([5, 6, 7]);
    expect(m.encode('The cat sat.')).toEqual([1, 2, 3, 4]);
    expect(t.decode([1, 2])).toContain('cat');
    for (const [tok, want] of [[t, [5, undefined, 6]], [m, [5, 6, 7]]] as const) {
      const dir2 = tmp();
      writeFiles(dir2, tok.files());
      expect(JSON.parse(tok.files()['tokenizer_config.json'] as string)).toMatchObject({ tokenizer_class: 'PreTrainedTokenizerFast', eos_token: '<|endoftext|>', unk_token: '[UNK]' });
      const r = await loadTokenizer(dir2);
      expect([r.eosId, r.maskId, r.vocabSize]).toEqual(want);
      expect(r.encode('the cat')).toEqual([1, 2]);
    }
  });

  it('rebuilds from in-memory files() without the file system (browser path)', async () => {
    const dir = tmp();
    writeFileSync(join(dir, 'tokenizer.json'), JSON.stringify(wordLevelJson()));
    const t = await loadTokenizer(dir);
    const bytes = Object.fromEntries(Object.entries(t.files()).map(([k, v]) => [k, typeof v === 'string' ? new TextEncoder().encode(v) : v]));
    const r = await tokenizerFromFiles(bytes);
    expect([r.eosId, r.maskId, r.vocabSize]).toEqual([5, undefined, 6]);
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
    expect([t.eosId, t.maskId, t.vocabSize]).toEqual([12, undefined, 13]);
    expect(t.withMaskToken().maskId).toBe(13);
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
