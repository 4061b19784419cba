/**
 * The safetensors format (https://github.com/huggingface/safetensors):
 *
 *   [8 bytes]  N, little-endian u64: the header length
 *   [N bytes]  JSON header, UTF-8, starting with '{', padded with spaces (0x20) so that the data
 *              starts at a multiple of 8: { "<name>": { "dtype": "F32", "shape": [..],
 *              "data_offsets": [begin, end] }, ..., "__metadata__": { "<k>": "<string>" } }
 *   [rest]     the data buffer; offsets are relative to its start, little-endian, row-major.
 *
 * The reader is as strict as the reference implementation: tensors must tile the data buffer
 * exactly (no overlap, no gap, no trailing bytes) and each byte range must match dtype × shape.
 * Every violation is an MdlmError('BAD_FILE') naming the file and the tensor.
 *
 * encodeSafetensors / decodeSafetensors work on byte arrays (usable in a browser); the file
 * functions read tensor by tensor, so a multi-GB checkpoint is never held in one buffer.
 */
import { closeSync, existsSync, fstatSync, fsyncSync, openSync, readFileSync, readSync, writeSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { bf16ToF32, encodeFloats, f16ToF32 } from '../convert.js';
import { fail } from '../errors.js';

if (new Uint8Array(new Uint16Array([1]).buffer)[0] !== 1) {
  throw new Error('safetensors: this module assumes a little-endian host');
}

export const ST_DTYPE_BYTES = {
  BOOL: 1, U8: 1, I8: 1, F8_E4M3: 1, F8_E5M2: 1,
  I16: 2, U16: 2, F16: 2, BF16: 2,
  I32: 4, U32: 4, F32: 4,
  I64: 8, U64: 8, F64: 8,
} as const;
export type StDType = keyof typeof ST_DTYPE_BYTES;
/** dtypes whose data this module returns (others are validated in the header but not read). */
export const READABLE_DTYPES = ['F32', 'F16', 'BF16', 'I32', 'I64', 'F64', 'U8', 'F8_E4M3', 'F8_E5M2'] as const;
export type ReadableDType = (typeof READABLE_DTYPES)[number];
export type WritableDType = 'F32' | 'F16' | 'BF16' | 'I32';

/**
 * A tensor to write. F16/BF16 take either raw 16-bit words (Uint16Array) or float32 values
 * (Float32Array), which are rounded to nearest even by src/convert.ts.
 */
export interface TensorToWrite {
  dtype: WritableDType;
  shape: readonly number[];
  data: Float32Array | Uint16Array | Int32Array;
}
export type TensorMap = Record<string, TensorToWrite>;

/** Data as stored: F32 Float32Array, F16/BF16 raw Uint16Array, I32 Int32Array, I64 BigInt64Array, F64 Float64Array, U8/F8 Uint8Array. */
export type TensorData = Float32Array | Uint16Array | Int32Array | BigInt64Array | Float64Array | Uint8Array;

export interface LoadedTensor {
  dtype: StDType;
  shape: number[];
  data: TensorData;
}

export interface TensorInfo {
  name: string;
  dtype: StDType;
  shape: number[];
  /** Byte offsets relative to the start of the data buffer. */
  begin: number;
  end: number;
}

export interface SafetensorsHeader {
  /** In data order. */
  tensors: Map<string, TensorInfo>;
  metadata: Record<string, string> | undefined;
  /** Absolute offset of the data buffer (8 + header length). */
  dataStart: number;
  dataLength: number;
}

/** Header longer than this is refused (the reference implementation's limit). */
export const MAX_HEADER_BYTES = 100_000_000;

const numel = (shape: readonly number[]) => shape.reduce((a, b) => a * b, 1);

// ---------------------------------------------------------------------------------------------
// Writing.

function checkTensor(name: string, t: TensorToWrite): void {
  const what = `safetensors: tensor '${name}'`;
  if (name === '' || name === '__metadata__') fail('BAD_ARGUMENT', `${what}: invalid tensor name`);
  if (!Array.isArray(t.shape) || t.shape.some((d) => !Number.isInteger(d) || d < 0)) {
    fail('BAD_ARGUMENT', `${what}: shape ${JSON.stringify(t.shape)} must be a list of non-negative integers`);
  }
  const n = numel(t.shape);
  if (t.data.length !== n) fail('BAD_ARGUMENT', `${what}: shape [${t.shape.join(', ')}] holds ${n} elements but data has ${t.data.length}`);
  const ok =
    (t.dtype === 'F32' && t.data instanceof Float32Array) ||
    ((t.dtype === 'F16' || t.dtype === 'BF16') && (t.data instanceof Float32Array || t.data instanceof Uint16Array)) ||
    (t.dtype === 'I32' && t.data instanceof Int32Array);
  if (!ok) {
    const allowed = { F32: 'Float32Array', F16: 'Float32Array or Uint16Array', BF16: 'Float32Array or Uint16Array', I32: 'Int32Array' }[t.dtype];
    if (!allowed) fail('BAD_ARGUMENT', `${what}: cannot write dtype '${String(t.dtype)}'; writable dtypes are F32, F16, BF16, I32`);
    fail('BAD_ARGUMENT', `${what}: dtype ${t.dtype} needs ${allowed} data, got ${t.data.constructor.name}`);
  }
}

function tensorBytes(t: TensorToWrite): Uint8Array {
  let arr: Float32Array | Uint16Array | Int32Array = t.data;
  if ((t.dtype === 'F16' || t.dtype === 'BF16') && arr instanceof Float32Array) {
    arr = encodeFloats(t.dtype === 'F16' ? 'f16' : 'bf16', arr) as Uint16Array;
  }
  return new Uint8Array(arr.buffer, arr.byteOffset, arr.byteLength);
}

function buildHeader(tensors: TensorMap, metadata?: Record<string, string>): { header: Uint8Array; dataLength: number; order: string[] } {
  const json: Record<string, unknown> = {};
  if (metadata !== undefined) {
    for (const [k, v] of Object.entries(metadata)) {
      if (typeof v !== 'string') fail('BAD_ARGUMENT', `safetensors: metadata '${k}' must be a string (got ${typeof v}); JSON.stringify it first`);
    }
    json.__metadata__ = metadata;
  }
  let offset = 0;
  const order = Object.keys(tensors);
  for (const name of order) {
    const t = tensors[name]!;
    checkTensor(name, t);
    const bytes = numel(t.shape) * ST_DTYPE_BYTES[t.dtype];
    json[name] = { dtype: t.dtype, shape: [...t.shape], data_offsets: [offset, offset + bytes] };
    offset += bytes;
  }
  const raw = new TextEncoder().encode(JSON.stringify(json));
  const padded = Math.ceil(raw.length / 8) * 8;
  const header = new Uint8Array(8 + padded).fill(0x20, 8);
  new DataView(header.buffer).setBigUint64(0, BigInt(padded), true);
  header.set(raw, 8);
  return { header, dataLength: offset, order };
}

/** The whole file as bytes (for small files and the browser). */
export function encodeSafetensors(tensors: TensorMap, metadata?: Record<string, string>): Uint8Array {
  const { header, dataLength, order } = buildHeader(tensors, metadata);
  const out = new Uint8Array(header.length + dataLength);
  out.set(header, 0);
  let pos = header.length;
  for (const name of order) {
    const b = tensorBytes(tensors[name]!);
    out.set(b, pos);
    pos += b.length;
  }
  return out;
}

function writeAll(fd: number, bytes: Uint8Array): void {
  let off = 0;
  while (off < bytes.length) off += writeSync(fd, bytes, off, Math.min(bytes.length - off, 1 << 30));
}

export interface WriteOptions {
  metadata?: Record<string, string>;
  /** fsync the file before closing (default true). */
  fsync?: boolean;
}

/** Write a safetensors file tensor by tensor (no whole-file buffer). */
export function writeSafetensors(path: string, tensors: TensorMap, opts: WriteOptions = {}): void {
  const { header, order } = buildHeader(tensors, opts.metadata);
  const fd = openSync(path, 'w');
  try {
    writeAll(fd, header);
    for (const name of order) writeAll(fd, tensorBytes(tensors[name]!));
    if (opts.fsync ?? true) fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

// ---------------------------------------------------------------------------------------------
// Reading.

const bad = (source: string, msg: string): never => fail('BAD_FILE', `${source}: ${msg}`);
const isObj = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const isCount = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;

/** Read N from the first 8 bytes and check it against the file size. */
export function headerLength(prefix: Uint8Array, fileSize: number, source: string): number {
  if (fileSize < 8 || prefix.length < 8) bad(source, `file is ${fileSize} bytes, too short to be a safetensors file (it needs an 8-byte header length); it is truncated or not a safetensors file`);
  const n = new DataView(prefix.buffer, prefix.byteOffset, 8).getBigUint64(0, true);
  if (n > BigInt(fileSize - 8)) bad(source, `header length ${n} runs past the end of the file (${fileSize} bytes); the file is truncated or not a safetensors file`);
  if (n > BigInt(MAX_HEADER_BYTES)) bad(source, `header length ${n} exceeds the ${MAX_HEADER_BYTES}-byte limit; not a safetensors file`);
  return Number(n);
}

/** Parse and validate the JSON header (bytes 8 .. 8+N) against the data length. */
export function parseHeader(headerBytes: Uint8Array, dataLength: number, source: string): SafetensorsHeader {
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(headerBytes);
  } catch {
    return bad(source, 'header is not valid UTF-8; the file is corrupt or not a safetensors file');
  }
  if (!text.startsWith('{')) bad(source, `header must start with '{' (starts with ${JSON.stringify(text.slice(0, 16))}); not a safetensors file`);
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (e) {
    return bad(source, `header is not valid JSON (${(e as Error).message}); the file is corrupt`);
  }
  if (!isObj(json)) return bad(source, 'header must be a JSON object');
  let metadata: Record<string, string> | undefined;
  const infos: TensorInfo[] = [];
  for (const [name, v] of Object.entries(json)) {
    if (name === '__metadata__') {
      if (!isObj(v) || Object.values(v).some((x) => typeof x !== 'string')) bad(source, '__metadata__ must be an object of string values');
      metadata = v as Record<string, string>;
      continue;
    }
    const where = `tensor '${name}'`;
    if (!isObj(v)) bad(source, `${where}: header entry must be an object with dtype, shape and data_offsets`);
    const e = v as Record<string, unknown>;
    const dtype = e.dtype;
    if (typeof dtype !== 'string' || !(dtype in ST_DTYPE_BYTES)) bad(source, `${where}: unknown dtype ${JSON.stringify(dtype)}; safetensors dtypes are ${Object.keys(ST_DTYPE_BYTES).join(', ')}`);
    if (!Array.isArray(e.shape) || !e.shape.every(isCount)) bad(source, `${where}: shape ${JSON.stringify(e.shape)} must be a list of non-negative integers`);
    const off = e.data_offsets;
    if (!Array.isArray(off) || off.length !== 2 || !isCount(off[0]) || !isCount(off[1]) || off[1] < off[0]) {
      bad(source, `${where}: data_offsets ${JSON.stringify(off)} must be [begin, end] with 0 <= begin <= end`);
    }
    const [begin, end] = off as [number, number];
    const shape = e.shape as number[];
    const want = numel(shape) * ST_DTYPE_BYTES[dtype as StDType];
    if (end - begin !== want) {
      bad(source, `${where}: ${dtype} shape [${shape.join(', ')}] needs ${want} bytes but data_offsets [${begin}, ${end}] span ${end - begin}; the dtype, shape or offsets are wrong`);
    }
    if (end > dataLength) bad(source, `${where}: data_offsets [${begin}, ${end}] run past the end of the data (${dataLength} bytes); the file is truncated`);
    infos.push({ name, dtype: dtype as StDType, shape, begin, end });
  }
  infos.sort((a, b) => a.begin - b.begin || a.end - b.end);
  let prev: TensorInfo | undefined;
  for (const t of infos) {
    const prevEnd = prev?.end ?? 0;
    if (t.begin < prevEnd) bad(source, `tensor '${t.name}' [${t.begin}, ${t.end}) overlaps tensor '${prev!.name}' [${prev!.begin}, ${prev!.end})`);
    if (t.begin > prevEnd) bad(source, `tensor '${t.name}' starts at ${t.begin} but the previous tensor ends at ${prevEnd}: the data has a gap (safetensors tensors must tile the data)`);
    prev = t;
  }
  const covered = prev?.end ?? 0;
  if (covered !== dataLength) bad(source, `tensors cover ${covered} bytes of data but the file holds ${dataLength}: ${dataLength - covered} trailing bytes`);
  return { tensors: new Map(infos.map((t) => [t.name, t])), metadata, dataStart: 0, dataLength };
}

function view(info: TensorInfo, bytes: Uint8Array, source: string): TensorData {
  // `bytes` is a fresh, 0-aligned copy of the tensor's data.
  const buf = bytes.buffer;
  const off = bytes.byteOffset;
  const n = numel(info.shape);
  switch (info.dtype) {
    case 'F32': return new Float32Array(buf, off, n);
    case 'F16':
    case 'BF16': return new Uint16Array(buf, off, n);
    case 'I32': return new Int32Array(buf, off, n);
    case 'I64': return new BigInt64Array(buf, off, n);
    case 'F64': return new Float64Array(buf, off, n);
    case 'U8':
    case 'F8_E4M3':
    case 'F8_E5M2': return new Uint8Array(buf, off, n);
    default: return bad(source, `tensor '${info.name}': dtype ${info.dtype} is not supported for reading (supported: ${READABLE_DTYPES.join(', ')})`);
  }
}

/** Decode a whole safetensors file held in memory (tensor data is copied). */
export function decodeSafetensors(bytes: Uint8Array, source = '<safetensors bytes>'): { tensors: Record<string, LoadedTensor>; metadata: Record<string, string> | undefined } {
  const n = headerLength(bytes, bytes.length, source);
  const h = parseHeader(bytes.subarray(8, 8 + n), bytes.length - 8 - n, source);
  const tensors: Record<string, LoadedTensor> = {};
  for (const t of h.tensors.values()) {
    const copy = bytes.slice(8 + n + t.begin, 8 + n + t.end);
    tensors[t.name] = { dtype: t.dtype, shape: t.shape, data: view(t, copy, source) };
  }
  return { tensors, metadata: h.metadata };
}

/** Float32 values of a float tensor: F32 as stored (no copy), F16/BF16 decoded, F64 rounded. */
export function toFloat32(t: LoadedTensor, name = 'tensor', source = 'safetensors'): Float32Array {
  switch (t.dtype) {
    case 'F32': return t.data as Float32Array;
    case 'F64': return Float32Array.from(t.data as Float64Array);
    case 'F16':
    case 'BF16': {
      const src = t.data as Uint16Array;
      const out = new Float32Array(src.length);
      const dec = t.dtype === 'F16' ? f16ToF32 : bf16ToF32;
      for (let i = 0; i < src.length; i++) out[i] = dec(src[i]!);
      return out;
    }
    default: return bad(source, `tensor '${name}' has dtype ${t.dtype}; a float tensor (F32, F16, BF16) was expected`);
  }
}

/** Read-only access to named tensors: one safetensors file or a sharded set. */
export interface TensorSource {
  /** Files read (one, or every shard). */
  readonly files: string[];
  readonly metadata: Record<string, string> | undefined;
  names(): string[];
  has(name: string): boolean;
  info(name: string): TensorInfo | undefined;
  read(name: string): LoadedTensor;
  readFloat32(name: string): Float32Array;
  close(): void;
}

function readExact(fd: number, length: number, position: number): Uint8Array {
  const out = new Uint8Array(length);
  let got = 0;
  while (got < length) {
    const n = readSync(fd, out, got, Math.min(length - got, 1 << 30), position + got);
    if (n === 0) break;
    got += n;
  }
  return got === length ? out : out.subarray(0, got);
}

/** Open one safetensors file: the header is read and validated now, tensors on demand. */
export function openSafetensors(path: string): TensorSource & { header: SafetensorsHeader } {
  let fd: number;
  try {
    fd = openSync(path, 'r');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') fail('NOT_FOUND', `safetensors file '${path}' does not exist`);
    return fail('BAD_FILE', `cannot open '${path}': ${(e as Error).message}`);
  }
  try {
    const size = fstatSync(fd).size;
    const n = headerLength(readExact(fd, 8, 0), size, path);
    const h = parseHeader(readExact(fd, n, 8), size - 8 - n, path);
    h.dataStart = 8 + n;
    let open = true;
    const get = (name: string): TensorInfo => h.tensors.get(name) ?? fail('BAD_FILE', `${path}: no tensor named '${name}'${nearby(name, h.tensors.keys())}`);
    const src = {
      files: [path],
      metadata: h.metadata,
      header: h,
      names: () => [...h.tensors.keys()],
      has: (name: string) => h.tensors.has(name),
      info: (name: string) => h.tensors.get(name),
      read(name: string): LoadedTensor {
        if (!open) throw new Error(`safetensors: '${path}' is closed`);
        const t = get(name);
        const bytes = readExact(fd, t.end - t.begin, h.dataStart + t.begin);
        if (bytes.length !== t.end - t.begin) bad(path, `tensor '${name}': file ended while reading its data (it changed since it was opened?)`);
        return { dtype: t.dtype, shape: [...t.shape], data: view(t, bytes, path) };
      },
      readFloat32: (name: string) => toFloat32(src.read(name), name, path),
      close() {
        if (open) closeSync(fd);
        open = false;
      },
    };
    return src;
  } catch (e) {
    closeSync(fd);
    throw e;
  }
}

function nearby(name: string, names: Iterable<string>): string {
  const all = [...names];
  const tail = name.split('.').slice(-2).join('.');
  const similar = all.filter((n) => n.endsWith(tail)).slice(0, 3);
  return similar.length ? ` (similar: ${similar.join(', ')})` : ` (it holds ${all.length} tensors)`;
}

/** Read every tensor of a file. */
export function readSafetensors(path: string): { tensors: Record<string, LoadedTensor>; metadata: Record<string, string> | undefined } {
  const f = openSafetensors(path);
  try {
    const tensors: Record<string, LoadedTensor> = {};
    for (const n of f.names()) tensors[n] = f.read(n);
    return { tensors, metadata: f.metadata };
  } finally {
    f.close();
  }
}

// ---------------------------------------------------------------------------------------------
// Sharded checkpoints: model.safetensors.index.json

export interface ShardIndex {
  metadata: Record<string, unknown>;
  /** tensor name → shard file name (relative to the index's directory). */
  weightMap: Record<string, string>;
}

export function readShardIndex(indexPath: string): ShardIndex {
  let text: string;
  try {
    text = readFileSync(indexPath, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') fail('NOT_FOUND', `shard index '${indexPath}' does not exist`);
    return fail('BAD_FILE', `cannot read '${indexPath}': ${(e as Error).message}`);
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (e) {
    return bad(indexPath, `not valid JSON (${(e as Error).message})`);
  }
  if (!isObj(json) || !isObj(json.weight_map)) return bad(indexPath, 'a shard index must be an object with a "weight_map" object (tensor name → shard file)');
  for (const [name, file] of Object.entries(json.weight_map)) {
    if (typeof file !== 'string' || file === '' || file.includes('/') || file.includes('\\') || file === '..' || file === '.') {
      bad(indexPath, `weight_map['${name}'] = ${JSON.stringify(file)} must be a file name in the index's directory`);
    }
  }
  return { metadata: isObj(json.metadata) ? json.metadata : {}, weightMap: json.weight_map as Record<string, string> };
}

/** Open the shards an index names; every tensor of the weight map must be in its shard. */
export function openSharded(indexPath: string): TensorSource {
  const idx = readShardIndex(indexPath);
  const dir = dirname(indexPath);
  const shards = new Map<string, ReturnType<typeof openSafetensors>>();
  const closeAll = () => {
    for (const s of shards.values()) s.close();
  };
  try {
    for (const file of new Set(Object.values(idx.weightMap))) {
      const p = join(dir, file);
      if (!existsSync(p)) bad(indexPath, `shard '${file}' named in weight_map does not exist in ${dir}`);
      shards.set(file, openSafetensors(p));
    }
    for (const [name, file] of Object.entries(idx.weightMap)) {
      if (!shards.get(file)!.has(name)) bad(indexPath, `weight_map puts tensor '${name}' in shard '${file}', but that shard has no such tensor`);
    }
  } catch (e) {
    closeAll();
    throw e;
  }
  const get = (name: string) => {
    const f = idx.weightMap[name];
    if (f === undefined) fail('BAD_FILE', `${indexPath}: no tensor named '${name}' in weight_map${nearby(name, Object.keys(idx.weightMap))}`);
    return shards.get(f)!;
  };
  return {
    files: [...shards.values()].map((s) => s.files[0]!),
    metadata: Object.fromEntries(Object.entries(idx.metadata).map(([k, v]) => [k, String(v)])),
    names: () => Object.keys(idx.weightMap),
    has: (name) => name in idx.weightMap,
    info: (name) => (name in idx.weightMap ? get(name).info(name) : undefined),
    read: (name) => get(name).read(name),
    readFloat32: (name) => get(name).readFloat32(name),
    close: closeAll,
  };
}

/**
 * Open a model's tensors: a `.safetensors` file, a `.index.json`, or a directory holding
 * `model.safetensors` or `model.safetensors.index.json`.
 */
export function openTensors(pathOrDir: string): TensorSource {
  if (pathOrDir.endsWith('.index.json')) return openSharded(pathOrDir);
  if (pathOrDir.endsWith('.safetensors')) return openSafetensors(pathOrDir);
  const single = join(pathOrDir, 'model.safetensors');
  const index = join(pathOrDir, 'model.safetensors.index.json');
  if (existsSync(single)) return openSafetensors(single);
  if (existsSync(index)) return openSharded(index);
  return fail('NOT_FOUND', `no model weights in '${pathOrDir}': expected ${basename(single)} or ${basename(index)}`);
}
