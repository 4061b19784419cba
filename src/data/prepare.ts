/**
 * `prepareData`: text → tokenizer → train.bin / val.bin shards + meta.json (+ the tokenizer's files).
 *
 * Inputs: a `.txt` file (documents separated by one or more blank lines), a `.jsonl` file (one JSON
 * object per line, text in `field`, default "text"), a directory (every .txt / .jsonl / .json-lines
 * file under it, recursively, in sorted path order), or nothing: the built-in Brown corpus.
 *
 * Split: document i (in input order, counting only non-empty documents) goes to val when
 * u_i < valFraction, u_i = Philox(seed, index i, purpose dataOrder, split lane) / 2^32 — a pure
 * function of (seed, i), so it streams. The last document is held back until the end so that val
 * and train are both non-empty whenever there are at least two documents.
 *
 * Shards are written to temporary files and renamed; meta.json is written last, so a directory
 * with a meta.json holds a complete dataset.
 */
import { createReadStream, existsSync, mkdirSync, readdirSync, statSync } from 'node:fs';
import { rename, rm, writeFile, open } from 'node:fs/promises';
import { createInterface } from 'node:readline';
import { join, relative, resolve, basename } from 'node:path';
import { fail } from '../errors.js';
import { philox4x32, RngPurpose, seedKey } from '../rng/philox.js';
import { brownDocuments } from './brown.js';
import { ShardWriter, type ShardSummary } from './shard.js';
import { ArrayTokenSource } from './source.js';
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
  /** Expected fraction of documents in val.bin (default 0.005), in [0, 1). */
  valFraction?: number;
  seed?: number;
  onProgress?: (p: PrepareProgress) => void;
}

export interface DataMeta {
  format: 'mdlm-tokens';
  version: 1;
  tokenizer: { spec: string; name: string; vocabSize: number; eosId: number; maskId?: number; padId?: number };
  source: { input: string; field?: string; files: number };
  split: { valFraction: number; seed: number };
  train: { file: string; documents: number; tokens: number; dtype: string };
  val: { file: string; documents: number; tokens: number; dtype: string };
  createdAt: string;
}

export const META_FILE = 'meta.json';
const TEXT_EXT = /\.(txt|text)$/i;
const JSONL_EXT = /\.(jsonl|ndjson)$/i;

/** The input files, sorted, for a file or directory. */
export function listInputFiles(input: string): string[] {
  if (!existsSync(input)) fail('NOT_FOUND', `input ${input} does not exist; pass a .txt or .jsonl file or a directory of them (or omit --input for the built-in Brown corpus)`);
  const st = statSync(input);
  if (st.isFile()) {
    if (!TEXT_EXT.test(input) && !JSONL_EXT.test(input)) fail('BAD_ARGUMENT', `input ${input}: unsupported file type; expected .txt (documents separated by blank lines) or .jsonl (one JSON object per line)`);
    return [input];
  }
  const out: string[] = [];
  const walk = (dir: string) => {
    for (const e of readdirSync(dir, { withFileTypes: true }).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))) {
      const p = join(dir, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.isFile() && (TEXT_EXT.test(e.name) || JSONL_EXT.test(e.name))) out.push(p);
    }
  };
  walk(input);
  if (out.length === 0) fail('NOT_FOUND', `directory ${input} contains no .txt or .jsonl files`);
  return out;
}

/** Documents of one input file, streamed. `onBytes` receives bytes consumed (approximate for UTF-8 lines). */
export async function* readDocuments(path: string, field = 'text', onBytes?: (n: number) => void): AsyncGenerator<string> {
  const rl = createInterface({ input: createReadStream(path, { encoding: 'utf8' }), crlfDelay: Infinity });
  const jsonl = JSONL_EXT.test(path);
  let lineNo = 0;
  let para: string[] = [];
  for await (const line of rl) {
    lineNo++;
    onBytes?.(Buffer.byteLength(line) + 1);
    if (jsonl) {
      if (line.trim() === '') continue;
      let obj: unknown;
      try {
        obj = JSON.parse(line);
      } catch (e) {
        fail('BAD_FILE', `${path}:${lineNo}: not valid JSON (${(e as Error).message}); each line of a .jsonl file must be one JSON object`);
      }
      if (!obj || typeof obj !== 'object' || Array.isArray(obj)) fail('BAD_FILE', `${path}:${lineNo}: expected a JSON object with a "${field}" field`);
      const v = (obj as Record<string, unknown>)[field];
      if (typeof v !== 'string') {
        const keys = Object.keys(obj as object).slice(0, 8).join(', ');
        fail('BAD_FILE', `${path}:${lineNo}: field "${field}" is ${v === undefined ? 'missing' : `a ${typeof v}, not a string`} (keys: ${keys}); pass --field with the name of the text field`);
      }
      if (v.trim() !== '') yield v;
    } else if (line.trim() === '') {
      if (para.length) yield para.join('\n');
      para = [];
    } else para.push(line);
  }
  if (para.length) yield para.join('\n');
}

/**
 * Tokenise a .txt / .jsonl file or a directory of them (documents as `mdlm data prepare` reads
 * them), each document followed by EOS.
 */
export async function tokenizeText(input: string, tokenizer: Tokenizer, field = 'text'): Promise<ArrayTokenSource> {
  const ids: number[] = [];
  for (const file of listInputFiles(input)) {
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

/** Whether document i goes to val: a pure function of (seed, i). */
export function isValDocument(seed: number, i: number, valFraction: number): boolean {
  const out = philox4x32([i >>> 0, Math.floor(i / 2 ** 32) >>> 0, 0xffffffff, RngPurpose.dataOrder], seedKey(seed)) as Uint32Array;
  return out[0]! / 2 ** 32 < valFraction;
}

export async function prepareData(opts: PrepareOptions): Promise<DataMeta> {
  const valFraction = opts.valFraction ?? 0.005;
  if (!(typeof valFraction === 'number' && valFraction >= 0 && valFraction < 1)) fail('BAD_ARGUMENT', `valFraction must be in [0, 1), got ${String(valFraction)}`);
  const seed = opts.seed ?? 0;
  if (!Number.isSafeInteger(seed) || seed < 0) fail('BAD_ARGUMENT', `seed must be a non-negative integer, got ${String(seed)}`);
  const field = opts.field ?? 'text';
  const tok = typeof opts.tokenizer === 'string' ? await loadTokenizer(opts.tokenizer) : opts.tokenizer;
  const spec = typeof opts.tokenizer === 'string' ? opts.tokenizer : tok.name;

  const out = resolve(opts.out);
  mkdirSync(out, { recursive: true });
  // A stale meta.json would vouch for shards this run is about to replace.
  await rm(join(out, META_FILE), { force: true });
  const files = opts.input === undefined ? [] : listInputFiles(opts.input);
  const progress: PrepareProgress = { done: 0, total: 0, unit: opts.input === undefined ? 'documents' : 'bytes', documents: 0, tokens: 0 };

  const shardOpts = { vocabSize: tok.vocabSize, eosId: tok.eosId };
  const train = await ShardWriter.create(join(out, 'train.bin'), shardOpts);
  const val = await ShardWriter.create(join(out, 'val.bin'), shardOpts);
  let trainSum: ShardSummary, valSum: ShardSummary;
  try {
    let index = 0;
    let held: number[] | undefined;
    let heldVal = false;
    const take = async (text: string) => {
      if (text.trim() === '') return;
      const ids = tok.encode(text);
      if (ids.length === 0) return;
      if (held) await (heldVal ? val : train).writeDocument(held);
      held = ids;
      heldVal = isValDocument(seed, index++, valFraction);
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
      progress.total = files.reduce((a, f) => a + statSync(f).size, 0);
      for (const f of files) {
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
    if (index < 2) fail('BAD_ARGUMENT', `input ${opts.input ?? 'brown'} holds ${index} non-empty document(s); at least 2 are needed (one for train, one for val)${opts.input && TEXT_EXT.test(opts.input) ? ' — in .txt files documents are separated by blank lines' : ''}`);
    // The held-back last document fills whichever split would otherwise be empty.
    if (val.documentCount === 0) heldVal = true;
    else if (train.documentCount === 0) heldVal = false;
    await (heldVal ? val : train).writeDocument(held!);
    trainSum = await train.close();
    valSum = await val.close();
  } catch (e) {
    await train.abort();
    await val.abort();
    throw e;
  }

  for (const [name, content] of Object.entries(tok.files())) await atomicWrite(join(out, name), content);
  const meta: DataMeta = {
    format: 'mdlm-tokens',
    version: 1,
    tokenizer: { spec, name: tok.name, vocabSize: tok.vocabSize, eosId: tok.eosId, maskId: tok.maskId, ...(tok.padId !== undefined ? { padId: tok.padId } : {}) },
    source: opts.input === undefined ? { input: 'brown', files: 500 } : { input: opts.input, field, files: files.length },
    split: { valFraction, seed },
    train: { file: basename(trainSum.path), documents: trainSum.documents, tokens: trainSum.tokens, dtype: trainSum.dtype },
    val: { file: basename(valSum.path), documents: valSum.documents, tokens: valSum.tokens, dtype: valSum.dtype },
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
