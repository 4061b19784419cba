/**
 * mdlm token shards (docs/DATA_FORMAT.md): a 64-byte little-endian header, then the tokens.
 *
 *   0  magic     8 bytes "MDLMTOK\0"
 *   8  version   u32 = 1
 *  12  dtype     u32: 1 = uint16, 2 = uint32
 *  16  count     u64 tokens
 *  24  vocab     u32 vocabulary size (every token id < vocab)
 *  28  eos       u32 EOS id (each document is followed by one EOS)
 *  32  docs      u64 number of documents
 *  40  reserved  zero up to byte 64
 *
 * Version 2 (chat data, `mdlm data prepare --format chat`) follows the tokens with a flags byte per
 * token: bit 0 (TOKEN_IN_LOSS) the token is one the loss is on (the assistant's), bit 1
 * (TOKEN_STARTS_DOCUMENT) it is the first token of a document, so documents are known without
 * relying on EOS (a chat template may put EOS inside a conversation). A document's EOS is in the
 * loss when the document's last token is. Shards without flags are written as version 1, as before.
 *
 * The writer streams tokens through a fixed buffer into a temporary file (flags into a second one,
 * appended at the end), fsyncs and renames it, so a shard that exists is whole. The reader
 * validates the header, the size and (as it reads) every token id and flags byte; files up to
 * `eagerBytes` are read at once, bigger ones by range.
 */
import { closeSync, createReadStream, fstatSync, openSync, readSync } from 'node:fs';
import { open, rename, rm, type FileHandle } from 'node:fs/promises';
import { dirname, basename, join } from 'node:path';
import { fail } from '../errors.js';
import { asFileError } from '../runtime/files.js';
import type { LossMaskReader, TokenSource } from './source.js';

export const SHARD_MAGIC = 'MDLMTOK\0';
/** The version of shards without flags; version 2 adds them. */
export const SHARD_VERSION = 1;
export const SHARD_FLAGS_VERSION = 2;
export const SHARD_HEADER_BYTES = 64;
/** Flags byte bit: the token is in the loss (the assistant's). */
export const TOKEN_IN_LOSS = 1;
/** Flags byte bit: the token starts a document. */
export const TOKEN_STARTS_DOCUMENT = 2;
const FLAG_BITS = TOKEN_IN_LOSS | TOKEN_STARTS_DOCUMENT;
export type ShardDType = 'uint16' | 'uint32';
const DTYPE_CODE: Record<ShardDType, number> = { uint16: 1, uint32: 2 };
const CODE_DTYPE: Record<number, ShardDType> = { 1: 'uint16', 2: 'uint32' };
const WIDTH: Record<ShardDType, number> = { uint16: 2, uint32: 4 };

export interface ShardHeader {
  /** 1: tokens; 2: tokens and a flags byte per token. */
  version: number;
  dtype: ShardDType;
  count: number;
  vocabSize: number;
  eosId: number;
  documents: number;
}

export function encodeShardHeader(h: Omit<ShardHeader, 'version'> & { version?: number }): Uint8Array {
  const buf = new Uint8Array(SHARD_HEADER_BYTES);
  const dv = new DataView(buf.buffer);
  for (let i = 0; i < 8; i++) buf[i] = SHARD_MAGIC.charCodeAt(i);
  dv.setUint32(8, h.version ?? SHARD_VERSION, true);
  dv.setUint32(12, DTYPE_CODE[h.dtype], true);
  dv.setBigUint64(16, BigInt(h.count), true);
  dv.setUint32(24, h.vocabSize, true);
  dv.setUint32(28, h.eosId, true);
  dv.setBigUint64(32, BigInt(h.documents), true);
  return buf;
}

/** Parse and check a header; `fileBytes` (when known) is checked against count × width. */
export function decodeShardHeader(path: string, buf: Uint8Array, fileBytes?: number): ShardHeader {
  if (buf.length < SHARD_HEADER_BYTES) {
    fail('BAD_FILE', `${path}: ${buf.length} bytes, shorter than the ${SHARD_HEADER_BYTES}-byte mdlm shard header; the file is truncated or not a shard — re-run "mdlm data prepare"`);
  }
  const magic = String.fromCharCode(...buf.subarray(0, 8));
  if (magic !== SHARD_MAGIC) {
    const hint = magic.startsWith('MMIDIDX') ? ' (that is a Megatron .idx file: pass the .bin/.idx prefix as a Megatron dataset)' : '';
    fail('BAD_FILE', `${path}: bad magic ${JSON.stringify(magic)}, expected "MDLMTOK\\0"; not an mdlm token shard${hint}`);
  }
  const dv = new DataView(buf.buffer, buf.byteOffset, SHARD_HEADER_BYTES);
  const version = dv.getUint32(8, true);
  if (version !== SHARD_VERSION && version !== SHARD_FLAGS_VERSION) {
    fail('BAD_FILE', `${path}: shard format version ${version}, this mdlm reads versions ${SHARD_VERSION} and ${SHARD_FLAGS_VERSION}; re-create it with "mdlm data prepare" or upgrade mdlm`);
  }
  const code = dv.getUint32(12, true);
  const dtype = CODE_DTYPE[code];
  if (!dtype) fail('BAD_FILE', `${path}: unknown dtype code ${code} in the header (1 = uint16, 2 = uint32); the file is corrupt`);
  const count = Number(dv.getBigUint64(16, true));
  const vocabSize = dv.getUint32(24, true);
  const eosId = dv.getUint32(28, true);
  const documents = Number(dv.getBigUint64(32, true));
  if (vocabSize === 0 || eosId >= vocabSize) {
    fail('BAD_FILE', `${path}: header has vocab size ${vocabSize} and EOS id ${eosId}; EOS must be below the vocab size — the file is corrupt`);
  }
  if (fileBytes !== undefined) {
    const flags = version === SHARD_FLAGS_VERSION;
    const want = SHARD_HEADER_BYTES + count * (WIDTH[dtype] + (flags ? 1 : 0));
    if (fileBytes !== want) {
      fail('BAD_FILE', `${path}: header says ${count} ${dtype} tokens${flags ? ' and their flags' : ''} (${want} bytes with the header) but the file has ${fileBytes} bytes; it is truncated or was written by an interrupted job — re-run "mdlm data prepare"`);
    }
  }
  return { version, dtype, count, vocabSize, eosId, documents };
}

export interface ShardWriterOptions {
  vocabSize: number;
  eosId: number;
  /** Default: uint16 when vocabSize ≤ 65536, else uint32. */
  dtype?: ShardDType;
  /** Tokens buffered before a write (default 1 << 20). */
  bufferTokens?: number;
  /** Each document comes with its loss mask (chat data): a version 2 shard with a flags byte per token. */
  lossMask?: boolean;
}

export interface ShardSummary {
  path: string;
  tokens: number;
  documents: number;
  dtype: ShardDType;
  bytes: number;
}

/**
 * Streams documents into a shard. `close()` makes it appear atomically; `abort()` leaves nothing.
 * With `lossMask`, each document's flags go to a second temporary file, appended to the tokens by
 * `close()`.
 */
export class ShardWriter {
  readonly path: string;
  readonly dtype: ShardDType;
  readonly vocabSize: number;
  readonly eosId: number;
  readonly lossMask: boolean;
  private readonly tmp: string;
  private fh: FileHandle | undefined;
  private readonly buf: Uint16Array | Uint32Array;
  private fill = 0;
  private pos = SHARD_HEADER_BYTES;
  private readonly flags: FlagFile | undefined;
  private tokens = 0;
  private docs = 0;
  private done = false;

  private constructor(path: string, tmp: string, fh: FileHandle, flags: FlagFile | undefined, opts: ShardWriterOptions) {
    this.path = path;
    this.tmp = tmp;
    this.fh = fh;
    this.flags = flags;
    this.lossMask = flags !== undefined;
    this.vocabSize = opts.vocabSize;
    this.eosId = opts.eosId;
    this.dtype = opts.dtype ?? (opts.vocabSize <= 65536 ? 'uint16' : 'uint32');
    const n = opts.bufferTokens ?? 1 << 20;
    this.buf = this.dtype === 'uint16' ? new Uint16Array(n) : new Uint32Array(n);
  }

  static async create(path: string, opts: ShardWriterOptions): Promise<ShardWriter> {
    if (!Number.isInteger(opts.vocabSize) || opts.vocabSize < 1 || opts.vocabSize > 2 ** 32) fail('BAD_ARGUMENT', `shard vocab size must be an integer in [1, 2^32], got ${opts.vocabSize}`);
    if (!Number.isInteger(opts.eosId) || opts.eosId < 0 || opts.eosId >= opts.vocabSize) fail('BAD_ARGUMENT', `shard EOS id ${opts.eosId} must be in [0, vocab size ${opts.vocabSize})`);
    if (opts.dtype === 'uint16' && opts.vocabSize > 65536) fail('BAD_ARGUMENT', `vocab size ${opts.vocabSize} does not fit uint16 tokens; use dtype uint32`);
    const tmp = tempName(path, '');
    const fh = await openTemp(tmp, path);
    let flags: FlagFile | undefined;
    try {
      if (opts.lossMask) {
        const flagsTmp = tempName(path, '.flags');
        flags = new FlagFile(flagsTmp, await openTemp(flagsTmp, path), opts.bufferTokens ?? 1 << 20);
      }
      await fh.write(new Uint8Array(SHARD_HEADER_BYTES), 0, SHARD_HEADER_BYTES, 0);
    } catch (e) {
      await fh.close().catch(() => undefined);
      await rm(tmp, { force: true });
      throw e;
    }
    return new ShardWriter(path, tmp, fh, flags, opts);
  }

  get tokenCount(): number {
    return this.tokens;
  }
  get documentCount(): number {
    return this.docs;
  }

  /**
   * Append one document and its EOS. Ids are checked against the vocab size. A shard with a loss
   * mask takes the document's (1: in the loss, 0: not, one per id); its EOS is in the loss when
   * the document's last token is.
   */
  async writeDocument(ids: ArrayLike<number>, lossMask?: ArrayLike<number>): Promise<void> {
    if (this.done) fail('BAD_ARGUMENT', `${this.path}: shard writer already closed`);
    const n = ids.length;
    for (let i = 0; i < n; i++) {
      const id = ids[i]!;
      if (!(id >= 0 && id < this.vocabSize && Number.isInteger(id))) {
        fail('BAD_ARGUMENT', `${this.path}: document ${this.docs}, token ${i}: id ${id} is outside [0, ${this.vocabSize}); the tokenizer and the shard's vocab size disagree`);
      }
    }
    if ((lossMask !== undefined) !== this.lossMask) {
      fail('BAD_ARGUMENT', `${this.path}: ${this.lossMask ? 'a shard with a loss mask needs one for every document' : 'a document with a loss mask, written to a shard created without lossMask'}`);
    }
    if (lossMask && lossMask.length !== n) fail('BAD_ARGUMENT', `${this.path}: document ${this.docs} has ${n} tokens but a loss mask of ${lossMask.length}`);
    if (lossMask && this.flags) {
      const flags = new Uint8Array(n + 1);
      for (let i = 0; i <= n; i++) flags[i] = (i < n ? lossMask[i]! : n > 0 ? lossMask[n - 1]! : 0) ? TOKEN_IN_LOSS : 0;
      flags[0]! |= TOKEN_STARTS_DOCUMENT;
      await this.flags.write(flags);
    }
    for (let i = 0; i <= n; i++) {
      this.buf[this.fill++] = i < n ? ids[i]! : this.eosId;
      if (this.fill === this.buf.length) await this.flush();
    }
    this.tokens += n + 1;
    this.docs++;
  }

  private async flush(): Promise<void> {
    if (this.fill === 0 || !this.fh) return;
    const bytes = new Uint8Array(this.buf.buffer, 0, this.fill * this.buf.BYTES_PER_ELEMENT);
    try {
      await this.fh.write(bytes, 0, bytes.length, this.pos);
    } catch (e) {
      throw asFileError(e, { path: this.path, action: 'write', flag: '--out' });
    }
    this.pos += bytes.length;
    this.fill = 0;
  }

  /** Write the header (and the flags after the tokens), fsync, rename into place. An empty shard is refused. */
  async close(): Promise<ShardSummary> {
    if (this.done) fail('BAD_ARGUMENT', `${this.path}: shard writer already closed`);
    if (this.tokens === 0) {
      await this.abort();
      fail('BAD_ARGUMENT', `${this.path}: no documents were written; an empty shard is not useful — check the input (empty files? wrong --field?)`);
    }
    try {
      await this.flush();
      if (this.flags) this.pos = await this.flags.appendTo(this.fh!, this.pos);
      const header = encodeShardHeader({
        version: this.flags ? SHARD_FLAGS_VERSION : SHARD_VERSION, dtype: this.dtype, count: this.tokens, vocabSize: this.vocabSize, eosId: this.eosId, documents: this.docs,
      });
      await this.fh!.write(header, 0, header.length, 0);
      await this.fh!.sync();
      await this.fh!.close();
      this.fh = undefined;
      await rename(this.tmp, this.path);
      await syncDir(dirname(this.path));
    } catch (e) {
      await this.abort();
      throw asFileError(e, { path: this.path, action: 'write', flag: '--out' });
    }
    this.done = true;
    return { path: this.path, tokens: this.tokens, documents: this.docs, dtype: this.dtype, bytes: this.pos };
  }

  async abort(): Promise<void> {
    this.done = true;
    if (this.fh) {
      await this.fh.close().catch(() => undefined);
      this.fh = undefined;
    }
    await this.flags?.discard();
    await rm(this.tmp, { force: true });
  }
}

/** A temporary file's name beside `path`. */
function tempName(path: string, suffix: string): string {
  return join(dirname(path), `.${basename(path)}${suffix}.tmp-${process.pid}-${Math.random().toString(36).slice(2, 8)}`);
}

async function openTemp(tmp: string, path: string): Promise<FileHandle> {
  try {
    return await open(tmp, 'w');
  } catch (e) {
    throw asFileError(e, { path: dirname(path), action: 'write in the directory', flag: '--out' });
  }
}

/** The flags bytes of a shard being written, in a temporary file of their own until the tokens are complete. */
class FlagFile {
  private readonly buf: Uint8Array;
  private fill = 0;
  private pos = 0;
  private fh: FileHandle | undefined;

  constructor(private readonly path: string, fh: FileHandle, bufferBytes: number) {
    this.fh = fh;
    this.buf = new Uint8Array(bufferBytes);
  }

  async write(flags: Uint8Array): Promise<void> {
    for (let i = 0; i < flags.length;) {
      const n = Math.min(flags.length - i, this.buf.length - this.fill);
      this.buf.set(flags.subarray(i, i + n), this.fill);
      this.fill += n;
      i += n;
      if (this.fill === this.buf.length) await this.flush();
    }
  }

  private async flush(): Promise<void> {
    if (this.fill === 0 || !this.fh) return;
    await this.fh.write(this.buf, 0, this.fill, this.pos);
    this.pos += this.fill;
    this.fill = 0;
  }

  /** Copy the flags to `out` at byte `at`, then delete this file; returns the end offset. */
  async appendTo(out: FileHandle, at: number): Promise<number> {
    await this.flush();
    await this.fh?.close();
    this.fh = undefined;
    let end = at;
    for await (const chunk of createReadStream(this.path) as AsyncIterable<Buffer>) {
      await out.write(chunk, 0, chunk.length, end);
      end += chunk.length;
    }
    await rm(this.path, { force: true });
    return end;
  }

  async discard(): Promise<void> {
    if (this.fh) await this.fh.close().catch(() => undefined);
    this.fh = undefined;
    await rm(this.path, { force: true });
  }
}

async function syncDir(dir: string): Promise<void> {
  // Make the rename durable; some platforms (Windows) cannot open directories — best effort there.
  try {
    const d = await open(dir, 'r');
    try {
      await d.sync();
    } finally {
      await d.close();
    }
  } catch {
    /* not supported */
  }
}

/** Write whole documents (and with `lossMask`, their `masks`) to a shard in one call (tests, small data). */
export async function writeShard(path: string, docs: Iterable<ArrayLike<number>>, opts: ShardWriterOptions, masks?: readonly ArrayLike<number>[]): Promise<ShardSummary> {
  const w = await ShardWriter.create(path, opts);
  try {
    let i = 0;
    for (const d of docs) await w.writeDocument(d, masks?.[i++]);
  } catch (e) {
    await w.abort();
    throw e;
  }
  return w.close();
}

export interface OpenShardOptions {
  /** Files up to this size are read into memory at open (and fully validated); default 512 MiB. */
  eagerBytes?: number;
}

/** A token shard opened for reading. */
export class TokenShard implements TokenSource {
  readonly path: string;
  readonly header: ShardHeader;
  /** Version 2: where documents start (from the flags); version 1: undefined (documents end at EOS). */
  readonly documentStarts: Float64Array | undefined;
  readonly lossMask: LossMaskReader | undefined;
  private fd: number | undefined;
  private readonly data: Uint16Array | Uint32Array | undefined;
  private readonly width: number;
  private scratch = new Uint8Array(0);

  private constructor(path: string, header: ShardHeader, fd: number | undefined, data: Uint16Array | Uint32Array | undefined, flags: ShardFlags | undefined) {
    this.path = path;
    this.header = header;
    this.fd = fd;
    this.data = data;
    this.width = WIDTH[header.dtype];
    this.documentStarts = flags?.starts;
    this.lossMask = flags && { read: (start, count, out) => this.readLossMask(flags, start, count, out) };
  }

  get length(): number {
    return this.header.count;
  }
  get vocabSize(): number {
    return this.header.vocabSize;
  }
  get eosId(): number {
    return this.header.eosId;
  }
  get documents(): number {
    return this.header.documents;
  }

  static open(path: string, opts: OpenShardOptions = {}): TokenShard {
    let fd: number;
    try {
      fd = openSync(path, 'r');
    } catch (e) {
      fail('NOT_FOUND', `cannot open token shard ${path}: ${(e as Error).message}; run "mdlm data prepare" to create it`);
    }
    try {
      const size = fstatSync(fd).size;
      const hb = new Uint8Array(Math.min(SHARD_HEADER_BYTES, size));
      readFully(fd, hb, 0, path);
      const header = decodeShardHeader(path, hb, size);
      if (header.count === 0) {
        fail('BAD_FILE', `${path}: the shard holds no tokens; re-run "mdlm data prepare" on non-empty input`);
      }
      const eager = size <= (opts.eagerBytes ?? 512 * 2 ** 20);
      const flags = header.version === SHARD_FLAGS_VERSION ? readFlags(fd, path, header, eager) : undefined;
      if (!eager) return new TokenShard(path, header, fd, undefined, flags);
      const bytes = new Uint8Array(header.count * WIDTH[header.dtype]);
      readFully(fd, bytes, SHARD_HEADER_BYTES, path);
      closeSync(fd);
      const data = header.dtype === 'uint16' ? new Uint16Array(bytes.buffer) : new Uint32Array(bytes.buffer);
      if (!littleEndian()) byteSwap(bytes, WIDTH[header.dtype]);
      checkIds(path, data, 0, header.vocabSize);
      return new TokenShard(path, header, undefined, data, flags);
    } catch (e) {
      try {
        closeSync(fd);
      } catch {
        /* already closed */
      }
      throw e;
    }
  }

  /** Loss bits of tokens [start, start + count): from memory, or read by range. */
  private readLossMask(flags: ShardFlags, start: number, count: number, out: Uint8Array = new Uint8Array(count)): Uint8Array {
    if (!(start >= 0 && count >= 0 && start + count <= this.header.count)) {
      throw new RangeError(`${this.path}: loss mask read [${start}, ${start + count}) outside [0, ${this.header.count})`);
    }
    let bytes = flags.bytes?.subarray(start, start + count);
    if (!bytes) {
      if (this.fd === undefined) throw new Error(`${this.path}: shard is closed`);
      bytes = new Uint8Array(count);
      readFully(this.fd, bytes, flagsOffset(this.header) + start, this.path);
    }
    for (let i = 0; i < count; i++) out[i] = bytes[i]! & TOKEN_IN_LOSS;
    return out;
  }

  read(start: number, count: number, out: Int32Array = new Int32Array(count)): Int32Array {
    if (!(start >= 0 && count >= 0 && start + count <= this.header.count)) {
      throw new RangeError(`${this.path}: read [${start}, ${start + count}) outside [0, ${this.header.count})`);
    }
    if (this.data) {
      const src = this.data.subarray(start, start + count);
      for (let i = 0; i < count; i++) out[i] = src[i]!;
      return out;
    }
    if (this.fd === undefined) throw new Error(`${this.path}: shard is closed`);
    const nb = count * this.width;
    if (this.scratch.length < nb) this.scratch = new Uint8Array(nb);
    const bytes = this.scratch.subarray(0, nb);
    readFully(this.fd, bytes, SHARD_HEADER_BYTES + start * this.width, this.path);
    const dv = new DataView(bytes.buffer, bytes.byteOffset, nb);
    for (let i = 0; i < count; i++) out[i] = this.width === 2 ? dv.getUint16(2 * i, true) : dv.getUint32(4 * i, true);
    checkIds(this.path, out.subarray(0, count), start, this.header.vocabSize);
    return out;
  }

  /** All tokens (reads the whole file when it was opened lazily). */
  tokens(): Int32Array {
    return this.read(0, this.header.count);
  }

  close(): void {
    if (this.fd !== undefined) closeSync(this.fd);
    this.fd = undefined;
  }
}

export function openShard(path: string, opts?: OpenShardOptions): TokenShard {
  return TokenShard.open(path, opts);
}

/** The flags of a version 2 shard: all of them (read eagerly), and where its documents start. */
interface ShardFlags {
  readonly bytes: Uint8Array | undefined;
  readonly starts: Float64Array;
}

function flagsOffset(h: ShardHeader): number {
  return SHARD_HEADER_BYTES + h.count * WIDTH[h.dtype];
}

/** Read (eagerly: keep) a version 2 shard's flags, check every byte, and find the document starts. */
function readFlags(fd: number, path: string, h: ShardHeader, keep: boolean): ShardFlags {
  const starts = new Float64Array(h.documents);
  let found = 0;
  const chunk = 1 << 20;
  const bytes = keep ? new Uint8Array(h.count) : undefined;
  const scratch = keep ? undefined : new Uint8Array(Math.min(chunk, h.count));
  for (let base = 0; base < h.count; base += chunk) {
    const n = Math.min(chunk, h.count - base);
    const buf = bytes ? bytes.subarray(base, base + n) : scratch!.subarray(0, n);
    readFully(fd, buf, flagsOffset(h) + base, path);
    for (let i = 0; i < n; i++) {
      const f = buf[i]!;
      if ((f & ~FLAG_BITS) !== 0) fail('BAD_FILE', `${path}: token ${base + i} has flags 0x${f.toString(16)}, which has bits other than ${FLAG_BITS}; the shard is corrupt — re-run "mdlm data prepare"`);
      if ((f & TOKEN_STARTS_DOCUMENT) === 0) {
        if (base + i === 0) fail('BAD_FILE', `${path}: the first token does not start a document; the shard is corrupt — re-run "mdlm data prepare"`);
        continue;
      }
      if (found === h.documents) fail('BAD_FILE', `${path}: more document starts than the ${h.documents} documents of the header; the shard is corrupt — re-run "mdlm data prepare"`);
      starts[found++] = base + i;
    }
  }
  if (found !== h.documents) fail('BAD_FILE', `${path}: ${found} document starts but the header says ${h.documents} documents; the shard is corrupt — re-run "mdlm data prepare"`);
  return { bytes, starts };
}

function checkIds(path: string, a: ArrayLike<number>, base: number, vocab: number): void {
  for (let i = 0; i < a.length; i++) {
    const v = a[i]!;
    if (v >= vocab || v < 0) {
      fail('BAD_FILE', `${path}: token ${base + i} has id ${v}, not below the vocab size ${vocab} in the header; the shard is corrupt or was written for another tokenizer — re-run "mdlm data prepare"`);
    }
  }
}

function readFully(fd: number, buf: Uint8Array, position: number, path: string): void {
  let off = 0;
  while (off < buf.length) {
    const n = readSync(fd, buf, off, buf.length - off, position + off);
    if (n === 0) fail('BAD_FILE', `${path}: unexpected end of file at byte ${position + off}; the file is truncated`);
    off += n;
  }
}

let le: boolean | undefined;
function littleEndian(): boolean {
  le ??= new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;
  return le;
}
function byteSwap(b: Uint8Array, w: number): void {
  for (let i = 0; i < b.length; i += w) b.subarray(i, i + w).reverse();
}
