/**
 * `prepareData`: text → tokenizer → train.bin / val.bin shards + meta.json (+ the tokenizer's files).
 *
 * Inputs (src/data/text.ts): a text or JSON Lines file, recognised by content; a directory (every
 * text file under it, recursively, in sorted path order); or nothing: the built-in Brown corpus.
 * The split between train and val: src/data/split.ts.
 *
 * Chat data (`format: 'chat'`, src/data/chat.ts): JSON Lines of conversations, each rendered with
 * the chat template (a Jinja file given, the tokenizer's own, or the built-in one) into a document
 * whose tokens carry the loss mask (the assistant's tokens), in version 2 shards; the template is
 * saved with the tokenizer (tokenizer_config.json's chat_template), so checkpoints trained on the
 * data and `mdlm chat` use the same one.
 *
 * Shards are written to temporary files and renamed; meta.json is written last, so a directory
 * with a meta.json holds a complete dataset.
 */
import { existsSync, readFileSync, statSync } from 'node:fs';
import { open, rename, rm, rmdir, writeFile } from 'node:fs/promises';
import { join, relative, resolve, basename } from 'node:path';
import { DATA_FORMATS, type DataFormat, DataSchema } from '../config/schema.js';
import { fail } from '../errors.js';
import { makeDir } from '../runtime/files.js';
import { brownDocuments } from './brown.js';
import { ChatTemplate, chatTemplateFor, parseConversation } from './chat.js';
import { ArrayTokenSource } from './source.js';
import { DEFAULT_VAL_TOKENS, SplitWriter } from './split.js';
import { jsonLines, listInputFiles, readDocuments } from './text.js';
import { loadTokenizer, type Tokenizer } from './tokenizer.js';

export interface PrepareProgress {
  /** Bytes of input read so far, and in all (Brown: documents instead of bytes). */
  done: number;
  total: number;
  unit: 'bytes' | 'documents';
  documents: number;
  tokens: number;
  file?: string;
}

export interface PrepareOptions {
  /** File or directory; undefined: the built-in Brown corpus (tokens only). */
  input?: string;
  /** tokens (default): text, every token trained on; chat: JSON Lines of conversations, with the loss mask. */
  format?: DataFormat;
  /** Chat data: a Jinja file to render the conversations with, instead of the tokenizer's chat template. */
  chatTemplate?: string;
  /** JSONL field holding the text (default "text"). */
  field?: string;
  /** "byte", "gpt2", a tokenizer.json path or directory — or a loaded Tokenizer. */
  tokenizer: string | Tokenizer;
  out: string;
  /** Probability that a document goes to val (default: data.valFraction's default), in [0, 1). */
  valFraction?: number;
  /** Least number of val tokens, up to a tenth of the data (default DEFAULT_VAL_TOKENS). */
  valTokens?: number;
  seed?: number;
  onProgress?: (p: PrepareProgress) => void;
}

export interface DataMeta {
  format: 'mdlm-tokens';
  version: 1;
  tokenizer: { spec: string; name: string; vocabSize: number; eosId: number; maskId?: number; padId?: number };
  /** `skipped`: files of an input directory left out as binary. */
  source: { input: string; field?: string; files: number; skipped?: string[] };
  /** `valTokens` is absent from datasets prepared before the val minimum existed. */
  split: { valFraction: number; valTokens?: number; seed: number };
  /**
   * Chat data (the shards carry the loss mask): where its chat template came from (a file, the
   * tokenizer's, the built-in one), and how many of the tokens are in the loss.
   */
  chat?: { template: string; lossTokens: number };
  train: { file: string; documents: number; tokens: number; dtype: string };
  val: { file: string; documents: number; tokens: number; dtype: string };
  createdAt: string;
}

export const META_FILE = 'meta.json';
/** The validation fraction when none is given: the config's, so `mdlm train` on text and `mdlm data prepare` agree. */
export const DEFAULT_VAL_FRACTION = DataSchema.shape.valFraction.parse(undefined);

/**
 * Tokenise a text / JSON Lines file or a directory of them (documents as `mdlm data prepare` reads
 * them), each document followed by EOS.
 */
export async function tokenizeText(input: string, tokenizer: Tokenizer, field = 'text'): Promise<ArrayTokenSource> {
  const ids: number[] = [];
  for (const file of listInputFiles(input).files) {
    for await (const doc of readDocuments(file, field)) {
      const docIds = tokenizer.encode(doc);
      if (docIds.length === 0) continue;
      for (const id of docIds) ids.push(id);
      ids.push(tokenizer.eosId);
    }
  }
  if (ids.length === 0) fail('BAD_ARGUMENT', `${input} holds no text to evaluate on`);
  return new ArrayTokenSource(input, Int32Array.from(ids), tokenizer.vocabSize, tokenizer.eosId);
}

export async function prepareData(opts: PrepareOptions): Promise<DataMeta> {
  const valFraction = opts.valFraction ?? DEFAULT_VAL_FRACTION;
  if (!(typeof valFraction === 'number' && valFraction >= 0 && valFraction < 1)) fail('BAD_ARGUMENT', `valFraction must be in [0, 1), got ${String(valFraction)}`);
  const valTokens = opts.valTokens ?? DEFAULT_VAL_TOKENS;
  if (!Number.isSafeInteger(valTokens) || valTokens < 0) fail('BAD_ARGUMENT', `valTokens must be a non-negative integer, got ${String(valTokens)}`);
  const seed = opts.seed ?? 0;
  if (!Number.isSafeInteger(seed) || seed < 0) fail('BAD_ARGUMENT', `seed must be a non-negative integer, got ${String(seed)}`);
  const field = opts.field ?? 'text';
  const format = opts.format ?? 'tokens';
  if (!DATA_FORMATS.includes(format)) fail('BAD_ARGUMENT', `format must be one of ${DATA_FORMATS.join(', ')}, got ${String(format)}`);
  if (format === 'chat' && opts.input === undefined) fail('BAD_ARGUMENT', 'chat data needs an input: a JSON Lines file of conversations (or a directory of them), one {"messages": [...]} or {"prompt", "response"} object a line');
  if (format !== 'chat' && opts.chatTemplate !== undefined) fail('BAD_ARGUMENT', 'a chat template applies to chat data only (format chat)');
  const loaded = typeof opts.tokenizer === 'string' ? await loadTokenizer(opts.tokenizer) : opts.tokenizer;
  const spec = typeof opts.tokenizer === 'string' ? opts.tokenizer : loaded.name;
  const chat = format === 'chat' ? chatTemplate(loaded, spec, opts.chatTemplate) : undefined;
  // The template goes with the tokenizer's files, so whatever trains on this data renders chats alike.
  const tok = chat ? loaded.withChatTemplate(chat.template.text) : loaded;

  const out = resolve(opts.out);
  const inputs = opts.input === undefined ? { files: [], skipped: [] } : listInputFiles(opts.input, out);
  const created = !existsSync(out);
  makeDir(out, '--out');
  const progress: PrepareProgress = { done: 0, total: 0, unit: opts.input === undefined ? 'documents' : 'bytes', documents: 0, tokens: 0 };

  const split = await SplitWriter.create(join(out, 'train.bin'), join(out, 'val.bin'), { vocabSize: tok.vocabSize, eosId: tok.eosId, lossMask: chat !== undefined }, { valFraction, valTokens, seed });
  let shards: Awaited<ReturnType<SplitWriter['finish']>>;
  let lossTokens = 0;
  try {
    const add = async (ids: number[], mask?: number[]) => {
      await split.add(ids, mask);
      progress.documents++;
      progress.tokens += ids.length + 1;
    };
    const take = async (text: string) => {
      if (text.trim() === '') return;
      const ids = tok.encode(text);
      if (ids.length > 0) await add(ids);
    };
    const report = () => opts.onProgress?.({ ...progress });
    if (opts.input === undefined) {
      const docs = brownDocuments();
      progress.total = docs.length;
      for (const d of docs) {
        await take(d);
        progress.done++;
        report();
      }
    } else {
      progress.total = inputs.files.reduce((a, f) => a + statSync(f).size, 0);
      for (const f of inputs.files) {
        progress.file = f;
        let sinceReport = 0;
        const onBytes = (n: number) => {
          progress.done += n;
          sinceReport += n;
        };
        const next = () => {
          if (sinceReport > 1 << 20) {
            report();
            sinceReport = 0;
          }
        };
        if (chat) {
          for await (const d of conversations(f, chat.template, onBytes)) {
            await add(d.ids, d.mask);
            lossTokens += d.lossTokens;
            next();
          }
        } else {
          for await (const d of readDocuments(f, field, onBytes)) {
            await take(d);
            next();
          }
        }
        report();
      }
    }
    if (split.documents < 2) {
      fail('BAD_ARGUMENT', `input ${opts.input ?? 'brown'} holds ${split.documents} non-empty document(s); at least 2 are needed (one for train, one for val) — in plain text, documents are separated by blank lines; in JSON Lines, each line is one`);
    }
    // Up to here an earlier dataset in `out` is whole; from the first rename on, its meta.json
    // would vouch for shards this run replaces.
    await rm(join(out, META_FILE), { force: true });
    shards = await split.finish();
  } catch (e) {
    await split.abort();
    // A directory made for this run and left empty goes too (rmdir refuses a non-empty one).
    if (created) await rmdir(out).catch(() => undefined);
    throw e;
  }

  for (const [name, content] of Object.entries(tok.files())) await atomicWrite(join(out, name), content);
  const meta: DataMeta = {
    format: 'mdlm-tokens',
    version: 1,
    tokenizer: { spec, name: tok.name, vocabSize: tok.vocabSize, eosId: tok.eosId, maskId: tok.maskId, ...(tok.padId !== undefined ? { padId: tok.padId } : {}) },
    source: opts.input === undefined
      ? { input: 'brown', files: 500 }
      : { input: opts.input, ...(chat ? {} : { field }), files: inputs.files.length, ...(inputs.skipped.length ? { skipped: inputs.skipped.map((f) => relative(opts.input!, f)) } : {}) },
    split: { valFraction, valTokens, seed },
    ...(chat ? { chat: { template: chat.origin, lossTokens } } : {}),
    train: { file: basename(shards.train.path), documents: shards.train.documents, tokens: shards.train.tokens, dtype: shards.train.dtype },
    val: { file: basename(shards.val.path), documents: shards.val.documents, tokens: shards.val.tokens, dtype: shards.val.dtype },
    createdAt: new Date().toISOString(),
  };
  await atomicWrite(join(out, META_FILE), JSON.stringify(meta, null, 2) + '\n');
  return meta;
}

/** Chat data's template: a Jinja file given, else the tokenizer's, else the built-in one; and where it came from. */
function chatTemplate(tok: Tokenizer, spec: string, file: string | undefined): { template: ChatTemplate; origin: string } {
  if (file === undefined) {
    const template = chatTemplateFor(tok, `the tokenizer ${spec}`);
    return { template, origin: tok.chatTemplate !== undefined ? 'tokenizer' : 'builtin' };
  }
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    fail('NOT_FOUND', `cannot read the chat template ${file} (${(e as NodeJS.ErrnoException).code ?? (e as Error).message}); pass a Jinja file`);
  }
  return { template: new ChatTemplate(text, tok, file), origin: file };
}

/**
 * The conversations of a JSON Lines file as documents: tokens, loss mask and the count of tokens
 * in the loss. A document's EOS is in the loss when its last token is (src/data/shard.ts), so a
 * rendered conversation that ends with EOS leaves it to the one the shard adds, where the two
 * agree.
 */
async function* conversations(file: string, template: ChatTemplate, onBytes: (n: number) => void): AsyncGenerator<{ ids: number[]; mask: number[]; lossTokens: number }> {
  const eos = template.tokenizer.eosId;
  for await (const { line, value } of jsonLines(file, onBytes)) {
    const where = `${file}:${line}`;
    const { ids, mask } = template.encode(parseConversation(value, where), false, where);
    const n = ids.length;
    const end = n > 1 && ids[n - 1] === eos && mask[n - 1] === mask[n - 2] ? n - 1 : n;
    const kept = { ids: ids.slice(0, end), mask: mask.slice(0, end) };
    // The EOS the shard adds counts as the last token does.
    yield { ...kept, lossTokens: kept.mask.reduce((a, b) => a + b, 0) + kept.mask[end - 1]! };
  }
}

async function atomicWrite(path: string, content: string | Uint8Array): Promise<void> {
  const tmp = `${path}.tmp-${process.pid}`;
  await writeFile(tmp, content);
  const fh = await open(tmp, 'r+');
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
  await rename(tmp, path);
}

/** For messages: a path relative to cwd when shorter. */
export function displayPath(p: string): string {
  const r = relative(process.cwd(), p);
  return r && !r.startsWith('..') && r.length < p.length ? r : p;
}
