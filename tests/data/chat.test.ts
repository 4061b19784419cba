/**
 * Chat data: conversations rendered with a chat template (a Jinja one from tokenizer_config.json,
 * or the built-in one) into shards whose loss mask marks exactly the assistant's tokens; bad rows
 * and templates refused naming the file and line, with nothing written; the shard's flags; the
 * rows of whole conversations the loader makes of them.
 */
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { resolveConfig } from '../../src/config/load.js';
import { BUILTIN_CHAT_TEMPLATE, ChatTemplate } from '../../src/data/chat.js';
import { openPreparedData } from '../../src/data/dataset.js';
import { createLoader, evalBatches } from '../../src/data/loader.js';
import { prepareData } from '../../src/data/prepare.js';
import { SHARD_HEADER_BYTES, openShard, writeShard } from '../../src/data/shard.js';
import { ArrayTokenSource } from '../../src/data/source.js';
import { loadTokenizer } from '../../src/data/tokenizer.js';
import type { Tokenizer } from '../../src/data/tokenizer_core.js';
import { openRunData } from '../../src/train/data.js';

const tmp = () => mkdtempSync(join(tmpdir(), 'mdlm-chat-'));
const EOS_TEXT = '<|endoftext|>';

/** ChatML, as Qwen's tokenizer_config.json has it. */
const CHATML = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/** A byte tokenizer directory whose tokenizer_config.json has `template` (and the rest of `extra`). */
function byteTokenizerDir(dir: string, template: string | undefined, extra: Record<string, unknown> = {}): string {
  const tok = join(dir, 'tok');
  mkdirSync(tok, { recursive: true });
  writeFileSync(join(tok, 'tokenizer_config.json'), JSON.stringify({ mdlm_tokenizer: 'byte', eos_token: EOS_TEXT, mask_token: '[MASK]', ...(template !== undefined ? { chat_template: template } : {}), ...extra }));
  return tok;
}

function jsonl(dir: string, name: string, rows: readonly unknown[]): string {
  const path = join(dir, name);
  writeFileSync(path, rows.map((r) => (typeof r === 'string' ? r : JSON.stringify(r))).join('\n') + '\n');
  return path;
}

/** Every document of a prepared dataset (train and val) as [text, the text of its tokens in the loss, piece by piece]. */
function documents(out: string, tok: Tokenizer): { text: string; inLoss: string[] }[] {
  const docs: { text: string; inLoss: string[] }[] = [];
  for (const file of ['train.bin', 'val.bin']) {
    const sh = openShard(join(out, file));
    const ids = sh.tokens();
    const mask = sh.lossMask!.read(0, sh.length);
    const starts = [...sh.documentStarts!, sh.length];
    for (let d = 0; d + 1 < starts.length; d++) {
      const [a, b] = [starts[d]!, starts[d + 1]!];
      const pieces: string[] = [];
      let run: number[] = [];
      for (let i = a; i < b; i++) {
        if (mask[i]) run.push(ids[i]!);
        else if (run.length) {
          pieces.push(tok.decode(run));
          run = [];
        }
      }
      if (run.length) pieces.push(tok.decode(run));
      docs.push({ text: tok.decode(Array.from(ids.subarray(a, b))), inLoss: pieces });
    }
  }
  return docs;
}

const rows = [
  { prompt: 'reverse abc', response: 'cba' },
  { messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'hi' }, { role: 'assistant', content: 'hello' }, { role: 'user', content: 'bye' }, { role: 'assistant', content: 'ciao' }] },
  { prompt: 'what is 2+2?', response: '4', system: 'math' },
];

describe('chat data', () => {
  it('renders with the built-in template; the loss mask is the assistant turns and their EOS, nothing else', async () => {
    const dir = tmp();
    const out = join(dir, 'out');
    const meta = await prepareData({ input: jsonl(dir, 'c.jsonl', rows), format: 'chat', tokenizer: 'byte', out, valFraction: 0.3, seed: 2 });
    const tok = await loadTokenizer(out);
    expect(tok.chatTemplate).toBe(BUILTIN_CHAT_TEMPLATE);
    expect(meta.chat).toEqual({ template: 'builtin', lossTokens: 'cba'.length + 1 + 'hello'.length + 1 + 'ciao'.length + 1 + '4'.length + 1 });
    const docs = documents(out, tok).sort((a, b) => a.text.localeCompare(b.text));
    // The assistant's EOS closes its turn: inside the conversation it is the template's, at the end the shard's.
    expect(docs).toEqual([
      { text: `<|system|>\nBe brief.\n<|user|>\nhi\n<|assistant|>\nhello${EOS_TEXT}<|user|>\nbye\n<|assistant|>\nciao${EOS_TEXT}`, inLoss: [`hello${EOS_TEXT}`, `ciao${EOS_TEXT}`] },
      { text: `<|system|>\nmath\n<|user|>\nwhat is 2+2?\n<|assistant|>\n4${EOS_TEXT}`, inLoss: [`4${EOS_TEXT}`] },
      { text: `<|user|>\nreverse abc\n<|assistant|>\ncba${EOS_TEXT}`, inLoss: [`cba${EOS_TEXT}`] },
    ]);
    // EOS is the EOS id, not its text in bytes.
    const sh = openShard(join(out, 'train.bin'));
    expect(Array.from(sh.tokens()).filter((id) => id === tok.eosId).length).toBeGreaterThan(0);
    expect(tok.decode(Array.from(sh.tokens())).includes('<|endoftext|>')).toBe(true);
  });

  it('renders with the Jinja chat template of tokenizer_config.json and keeps it with the data', async () => {
    const dir = tmp();
    const out = join(dir, 'out');
    const meta = await prepareData({ input: jsonl(dir, 'c.jsonl', rows), format: 'chat', tokenizer: byteTokenizerDir(dir, CHATML), out, valFraction: 0.3, seed: 2 });
    expect(meta.chat?.template).toBe('tokenizer');
    const tok = await loadTokenizer(out);
    expect(tok.chatTemplate).toBe(CHATML);
    expect(JSON.parse(readFileSync(join(out, 'tokenizer_config.json'), 'utf8')).chat_template).toBe(CHATML);
    const docs = documents(out, tok).sort((a, b) => a.text.localeCompare(b.text));
    // The EOS that ends the document follows the last turn into the loss.
    expect(docs.map((d) => d.inLoss)).toEqual([['hello<|im_end|>\n', `ciao<|im_end|>\n${EOS_TEXT}`], [`4<|im_end|>\n${EOS_TEXT}`], [`cba<|im_end|>\n${EOS_TEXT}`]]);
    expect(docs[2]!.text).toBe(`<|im_start|>user\nreverse abc<|im_end|>\n<|im_start|>assistant\ncba<|im_end|>\n${EOS_TEXT}`);
    // The end of the turn is what `mdlm chat` stops at, and what follows the generation prompt.
    const t = new ChatTemplate(CHATML, tok, 'x');
    expect(t.turnEnd).toBe('<|im_end|>');
    expect(tok.decode(t.encode([{ role: 'user', content: 'hi' }], true).ids)).toBe('<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n');
    expect(new ChatTemplate(BUILTIN_CHAT_TEMPLATE, tok, 'x').turnEnd).toBeUndefined();
  });

  it('a --chat-template file wins over the tokenizer\'s; chat_template.jinja beside tokenizer_config.json is read', async () => {
    const dir = tmp();
    const file = join(dir, 't.jinja');
    writeFileSync(file, "{% for m in messages %}{% if m.role == 'user' %}Q: {{ m.content }}\n{% else %}A: {{ m.content }}\n{% endif %}{% endfor %}{% if add_generation_prompt %}A: {% endif %}");
    const out = join(dir, 'out');
    const meta = await prepareData({ input: jsonl(dir, 'c.jsonl', rows.slice(0, 1).concat(rows.slice(0, 1))), format: 'chat', chatTemplate: file, tokenizer: byteTokenizerDir(dir, CHATML), out, valFraction: 0.5 });
    expect(meta.chat?.template).toBe(file);
    const tok = await loadTokenizer(out);
    expect(documents(out, tok)[0]).toEqual({ text: `Q: reverse abc\nA: cba\n${EOS_TEXT}`, inLoss: [`cba\n${EOS_TEXT}`] });
    const side = join(dir, 'side');
    mkdirSync(side);
    writeFileSync(join(side, 'tokenizer_config.json'), JSON.stringify({ mdlm_tokenizer: 'byte', eos_token: EOS_TEXT, mask_token: '[MASK]' }));
    writeFileSync(join(side, 'chat_template.jinja'), CHATML);
    expect((await loadTokenizer(side)).chatTemplate).toBe(CHATML);
  });

  it('refuses a malformed row, an unknown role or a failing template naming the file and line, and writes nothing', async () => {
    const dir = tmp();
    const out = join(dir, 'out');
    const bad: [unknown[], RegExp][] = [
      [[rows[0], '{"prompt": "x", "response": '], /c\.jsonl:2: not valid JSON/],
      [[rows[0], rows[0], { messages: [{ role: 'user', content: 'a' }, { role: 'robot', content: 'b' }] }], /c\.jsonl:3: messages\[1\]: unknown role "robot"; the roles are system, user, assistant/],
      [[{ prompt: 'a', answer: 'b' }], /c\.jsonl:1: unknown keys answer beside prompt and response/],
      [[rows[0], { prompt: 'a', response: 7 }], /c\.jsonl:2: "response" is a number, not a string/],
      [[rows[0], { messages: [{ role: 'user', content: 'only a question' }] }], /c\.jsonl:2: the conversation has no assistant message/],
      [[rows[0], { messages: [{ role: 'user' }, { role: 'assistant', content: 'b' }] }], /c\.jsonl:2: messages\[0\]: "content" is missing/],
      [[{ text: 'plain' }], /c\.jsonl:1: keys text are not a conversation/],
    ];
    for (const [lines, message] of bad) {
      await expect(prepareData({ input: jsonl(dir, 'c.jsonl', lines), format: 'chat', tokenizer: 'byte', out })).rejects.toMatchObject({ code: 'BAD_FILE', message: expect.stringMatching(message) });
      expect(existsSync(out)).toBe(false);
    }
    // A template that raises (as Llama's do on roles they do not take), after a good dataset: that one stays whole.
    await prepareData({ input: jsonl(dir, 'c.jsonl', rows), format: 'chat', tokenizer: 'byte', out, valFraction: 0.3 });
    const before = readdirSync(out).sort();
    const strict = byteTokenizerDir(dir, "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('no system messages') }}{% endif %}{{ m.content }}{% endfor %}");
    await expect(prepareData({ input: jsonl(dir, 'c.jsonl', rows), format: 'chat', tokenizer: strict, out })).rejects.toMatchObject({
      code: 'BAD_FILE', message: expect.stringMatching(/c\.jsonl:2: the chat template of the tokenizer .*tok fails to render it \(.*no system messages/),
    });
    expect(readdirSync(out).sort()).toEqual(before);
    expect((await openPreparedData(out)).meta.chat?.template).toBe('builtin');
    // Invalid Jinja fails before anything is read.
    await expect(prepareData({ input: jsonl(dir, 'c.jsonl', rows), format: 'chat', tokenizer: byteTokenizerDir(dir, '{% if %}'), out: join(dir, 'o2') })).rejects.toMatchObject({
      code: 'BAD_FILE', message: expect.stringMatching(/the chat template is not valid Jinja/),
    });
    // A template that renders earlier turns differently once more follow cannot mark the assistant's tokens.
    const rewriting = byteTokenizerDir(dir, "{% for m in messages %}{% if m.role == 'assistant' and not loop.last %}[earlier]{% else %}{{ m.content }}{% endif %}{% endfor %}");
    await expect(prepareData({ input: jsonl(dir, 'c.jsonl', rows), format: 'chat', tokenizer: rewriting, out: join(dir, 'o3') })).rejects.toMatchObject({
      message: expect.stringMatching(/c\.jsonl:2: .*renders the conversation up to message 3 as something other than the beginning of the whole/),
    });
    expect(existsSync(join(dir, 'o2')) || existsSync(join(dir, 'o3'))).toBe(false);
    await expect(prepareData({ format: 'chat', tokenizer: 'byte', out: join(dir, 'o4') })).rejects.toMatchObject({ code: 'BAD_ARGUMENT', message: expect.stringMatching(/chat data needs an input/) });
  });
});

describe('a run\'s data format', () => {
  it('chat data trains under data.format chat only, token data under tokens only, each refusal naming the fix', async () => {
    const dir = tmp();
    const chat = join(dir, 'chat');
    await prepareData({ input: jsonl(dir, 'c.jsonl', rows), format: 'chat', tokenizer: 'byte', out: chat, valFraction: 0.3 });
    const text = join(dir, 'text');
    writeFileSync(join(dir, 't.txt'), 'one document\n\nanother one\n');
    await prepareData({ input: join(dir, 't.txt'), tokenizer: 'byte', out: text });
    const data = (path: string, format: string) => openRunData(resolveConfig({ overrides: { 'data.path': path, 'data.format': format, out: join(dir, 'run') } }), () => {});
    expect((await data(chat, 'chat')).train.lossMask).toBeDefined();
    await expect(data(chat, 'tokens')).rejects.toMatchObject({ code: 'BAD_CONFIG', message: expect.stringMatching(/holds chat data .* set --data\.format chat/) });
    await expect(data(text, 'chat')).rejects.toMatchObject({ code: 'BAD_CONFIG', message: expect.stringMatching(/holds token data but data\.format is chat; prepare the conversations with "mdlm data prepare --format chat"/) });
  });
});

describe('token shards with flags (version 2)', () => {
  it('keep each token\'s loss bit and the document starts; version 1 shards have neither', async () => {
    const dir = tmp();
    const path = join(dir, 'a.bin');
    const docs = [[1, 2, 3], [4, 5], [6]];
    const masks = [[0, 1, 1], [1, 0], [0]];
    await writeShard(path, docs, { vocabSize: 10, eosId: 9, lossMask: true, bufferTokens: 2 }, masks);
    expect(readdirSync(dir)).toEqual(['a.bin']);
    const bytes = readFileSync(path);
    expect(bytes.readUInt32LE(8)).toBe(2);
    expect(bytes.length).toBe(SHARD_HEADER_BYTES + 9 * 2 + 9);
    // EOS follows its document's last token into (or out of) the loss.
    const mask = [0, 1, 1, 1, 1, 0, 0, 0, 0];
    for (const eagerBytes of [undefined, 0]) {
      const sh = openShard(path, eagerBytes === undefined ? {} : { eagerBytes });
      expect(Array.from(sh.tokens())).toEqual([1, 2, 3, 9, 4, 5, 9, 6, 9]);
      expect(Array.from(sh.lossMask!.read(0, 9))).toEqual(mask);
      expect(Array.from(sh.lossMask!.read(3, 3))).toEqual(mask.slice(3, 6));
      expect(Array.from(sh.documentStarts!)).toEqual([0, 4, 7]);
      sh.close();
    }
    const plain = join(dir, 'b.bin');
    await writeShard(plain, docs, { vocabSize: 10, eosId: 9 });
    expect(readFileSync(plain).readUInt32LE(8)).toBe(1);
    expect(openShard(plain)).toMatchObject({ lossMask: undefined, documentStarts: undefined });
    // A flags byte with unknown bits, or a first token that starts no document, is corruption.
    for (const [at, value, why] of [[SHARD_HEADER_BYTES + 18 + 4, 0x07, /token 4 has flags 0x7/], [SHARD_HEADER_BYTES + 18, 0x01, /first token does not start a document/]] as const) {
      const broken = Buffer.from(bytes);
      broken[at] = value;
      writeFileSync(join(dir, 'c.bin'), broken);
      expect(() => openShard(join(dir, 'c.bin'))).toThrow(why);
    }
    await expect(writeShard(join(dir, 'd.bin'), docs, { vocabSize: 10, eosId: 9, lossMask: true })).rejects.toMatchObject({ message: expect.stringMatching(/needs one for every document/) });
    expect(readdirSync(dir).filter((f) => f.startsWith('.'))).toEqual([]);
  });
});

describe('rows of whole conversations', () => {
  // Three conversations (EOS = 0 ends each): 5, 3 and 9 tokens; 1 marks the assistant's.
  const convs = [[11, 12, 13, 14, 0], [21, 22, 0], [31, 32, 33, 34, 35, 36, 37, 38, 0]];
  const masks = [[0, 0, 1, 1, 1], [0, 1, 1], [0, 0, 0, 0, 1, 1, 1, 1, 1]];
  const source = new ArrayTokenSource('convs', Int32Array.from(convs.flat()), 100, 0, Uint8Array.from(masks.flat()));
  const rowsOf = (pack: boolean, padding: 'eos' | 'none') => [...evalBatches(source, { seqLen: 8, batchSize: 1, conversations: { pack, padding } })];

  it('pack several whole conversations a row, each its own document, padding outside attention and loss', () => {
    const batches = rowsOf(true, 'none');
    expect(batches.length).toBe(2);
    const [a, b] = batches;
    expect(Array.from(a!.tokens)).toEqual([11, 12, 13, 14, 0, 21, 22, 0]);
    expect(Array.from(a!.targets)).toEqual([12, 13, 14, 0, -1, 22, 0, -1]);
    expect(Array.from(a!.segIds)).toEqual([0, 0, 0, 0, 0, 1, 1, 1]);
    expect(Array.from(a!.positions)).toEqual([0, 1, 2, 3, 4, 0, 1, 2]);
    expect(Array.from(a!.lossMask!)).toEqual([0, 0, 1, 1, 1, 0, 1, 1]);
    // The 9-token conversation keeps its first 8.
    expect(Array.from(b!.tokens)).toEqual([31, 32, 33, 34, 35, 36, 37, 38]);
    expect(Array.from(b!.targets)).toEqual([32, 33, 34, 35, 36, 37, 38, -1]);
  });

  it('one conversation a row, padded with EOS that continues its reply in the loss (or with padding apart)', () => {
    const eos = rowsOf(false, 'eos');
    expect(eos.length).toBe(3);
    expect(Array.from(eos[1]!.tokens)).toEqual([21, 22, 0, 0, 0, 0, 0, 0]);
    expect(Array.from(eos[1]!.targets)).toEqual([22, 0, 0, 0, 0, 0, 0, -1]);
    expect(Array.from(eos[1]!.segIds)).toEqual([0, 0, 0, 0, 0, 0, 0, 0]);
    expect(Array.from(eos[1]!.positions)).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    expect(Array.from(eos[1]!.lossMask!)).toEqual([0, 1, 1, 1, 1, 1, 1, 1]);
    const none = rowsOf(false, 'none');
    expect(Array.from(none[1]!.targets)).toEqual([22, 0, -1, -1, -1, -1, -1, -1]);
    expect(Array.from(none[1]!.segIds)).toEqual([0, 0, 0, 1, 1, 1, 1, 1]);
    expect(Array.from(none[1]!.positions)).toEqual([0, 1, 2, 0, 1, 2, 3, 4]);
    expect(Array.from(none[1]!.lossMask!)).toEqual([0, 1, 1, 0, 0, 0, 0, 0]);
  });

  it('the training loader shuffles whole rows per epoch, every row once, and resumes from its cursor', () => {
    const loader = createLoader(source, { seqLen: 8, batchSize: 1, seed: 3, conversations: { pack: false, padding: 'eos' } });
    expect([loader.windows, loader.batchesPerEpoch, loader.conversations?.truncated]).toEqual([3, 3, 1]);
    const firsts = [0, 1, 2].map(() => loader.next().tokens[0]);
    expect(firsts.slice().sort()).toEqual([11, 21, 31]);
    const state = loader.state();
    const next = loader.next();
    const again = createLoader(source, { seqLen: 8, batchSize: 1, seed: 3, conversations: { pack: false, padding: 'eos' } });
    again.restore(state);
    expect(again.next()).toEqual(next);
    // Token data is refused as conversations, naming what to do.
    const plain = new ArrayTokenSource('plain', Int32Array.from(convs.flat()), 100, 0);
    expect(() => createLoader(plain, { seqLen: 8, batchSize: 1, seed: 0, conversations: { pack: true, padding: 'none' } })).toThrow(/holds no loss mask: it is not chat data/);
  });
});
