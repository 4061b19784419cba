/**
 * `prepareData`: text → tokenizer → train.bin / val.bin shards + meta.json (+ the tokenizer's files).
 *
 * Inputs (src/data/text.ts): a text or JSON Lines file, recognised by content; a directory (every
 * text file under it, recursively, in sorted path order); or nothing: the built-in Brown corpus.
 * The split between train and val: src/data/split.ts.
 *
 * Shards are written to temporary files and renamed; meta.json is written last, so a directory
 * with a meta.json holds a complete dataset.
 */
import { existsSync, statSync } from 'node:fs';
import { open, rename, rm, rmdir, writeFile } from 'node:fs/promises';
import { join, relative, resolve, basename } from 'node:path';
import { DataSchema } from '../config/schema.js';
import { fail } from '../errors.js';
import { makeDir } from '../runtime/files.js';
import { brownDocuments } from './brown.js';
import { ArrayTokenSource } from './source.js';
import { DEFAULT_VAL_TOKENS, SplitWriter } from './split.js';
import { listInputFiles, readDocuments } from './text.js';
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
  /** File or directory; undefined: the built-in Brown corpus. */
  input?: string;
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
  const tok = typeof opts.tokenizer === 'string' ? await loadTokenizer(opts.tokenizer) : opts.tokenizer;
  const spec = typeof opts.tokenizer === 'string' ? opts.tokenizer : tok.name;

  const out = resolve(opts.out);
  const inputs = opts.input === undefined ? { files: [], skipped: [] } : listInputFiles(opts.input, out);
  const created = !existsSync(out);
  makeDir(out, '--out');
  const progress: PrepareProgress = { done: 0, total: 0, unit: opts.input === undefined ? 'documents' : 'bytes', documents: 0, tokens: 0 };

  const split = await SplitWriter.create(join(out, 'train.bin'), join(out, 'val.bin'), { vocabSize: tok.vocabSize, eosId: tok.eosId }, { valFraction, valTokens, seed });
  let shards: Awaited<ReturnType<SplitWriter['finish']>>;
  try {
    const take = async (text: string) => {
      if (text.trim() === '') return;
      const ids = tok.encode(text);
      if (ids.length === 0) return;
      await split.add(ids);
      progress.documents++;
      progress.tokens += ids.length + 1;
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
        for await (const d of readDocuments(f, field, (n) => { progress.done += n; sinceReport += n; })) {
          await take(d);
          if (sinceReport > 1 << 20) {
            report();
            sinceReport = 0;
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
      : { input: opts.input, field, files: inputs.files.length, ...(inputs.skipped.length ? { skipped: inputs.skipped.map((f) => relative(opts.input!, f)) } : {}) },
    split: { valFraction, valTokens, seed },
    train: { file: basename(shards.train.path), documents: shards.train.documents, tokens: shards.train.tokens, dtype: shards.train.dtype },
    val: { file: basename(shards.val.path), documents: shards.val.documents, tokens: shards.val.tokens, dtype: shards.val.dtype },
    createdAt: new Date().toISOString(),
  };
  await atomicWrite(join(out, META_FILE), JSON.stringify(meta, null, 2) + '\n');
  return meta;
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
