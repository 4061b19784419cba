/**
 * Megatron-LM indexed datasets (`<prefix>.bin` + `<prefix>.idx`, the MMIDIDX format of
 * megatron/core/datasets/indexed_dataset.py), read as they are. The .idx layout (little-endian):
 *
 *   magic "MMIDIDX\0\0" (9 bytes) · version u64 = 1 · dtype code u8 · sequence count u64 (S) ·
 *   document count u64 (D, = documents + 1) · sequence lengths int32[S] · sequence pointers
 *   int64[S] (byte offsets into .bin) · document indices int64[D] (sequence index where each
 *   document starts, the last = S) · [sequence modes int8[S], multimodal only — ignored]
 *
 * dtype codes: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64, 7 float32, 8 uint16. Token
 * data must be an integer type. The .bin is the sequences' tokens back to back; it is read by range.
 */
import { closeSync, existsSync, fstatSync, openSync, readFileSync, readSync } from 'node:fs';
import { fail } from '../errors.js';
import type { TokenSource } from './source.js';

export const MEGATRON_MAGIC = 'MMIDIDX\0\0';
const DTYPES: Record<number, { name: string; width: number; int: boolean }> = {
  1: { name: 'uint8', width: 1, int: true },
  2: { name: 'int8', width: 1, int: true },
  3: { name: 'int16', width: 2, int: true },
  4: { name: 'int32', width: 4, int: true },
  5: { name: 'int64', width: 8, int: true },
  6: { name: 'float64', width: 8, int: false },
  7: { name: 'float32', width: 4, int: false },
  8: { name: 'uint16', width: 2, int: true },
};

export interface MegatronOptions {
  /** Check every token id against this (recommended: the tokenizer's vocab size). */
  vocabSize?: number;
  /** The EOD id, if the data was prepared with --append-eod (informational; documents come from the index). */
  eosId?: number;
}

/** `path` may be the prefix, `<prefix>.bin` or `<prefix>.idx`. */
export function megatronPrefix(path: string): string {
  return path.replace(/\.(bin|idx)$/, '');
}

export function isMegatronDataset(path: string): boolean {
  const p = megatronPrefix(path);
  return existsSync(`${p}.idx`) && existsSync(`${p}.bin`);
}

export class MegatronDataset implements TokenSource {
  readonly path: string;
  readonly idxPath: string;
  readonly dtype: string;
  readonly length: number;
  readonly vocabSize: number | undefined;
  readonly eosId: number | undefined;
  /** Token lengths of the sequences. */
  readonly sequenceLengths: Int32Array;
  /** Token offset of each sequence in .bin. */
  readonly sequencePointers: Float64Array;
  /** Sequence index where each document starts (D entries, the last = S). */
  readonly documentIndices: Float64Array;
  readonly documentStarts: Float64Array;
  readonly lossMask = undefined;
  private fd: number | undefined;
  private readonly width: number;
  private readonly code: number;
  private scratch = new Uint8Array(0);

  private constructor(init: {
    binPath: string; idxPath: string; code: number; fd: number; lengths: Int32Array; pointers: Float64Array; docIdx: Float64Array; total: number; opts: MegatronOptions;
  }) {
    this.path = init.binPath;
    this.idxPath = init.idxPath;
    this.code = init.code;
    this.dtype = DTYPES[init.code]!.name;
    this.width = DTYPES[init.code]!.width;
    this.fd = init.fd;
    this.sequenceLengths = init.lengths;
    this.sequencePointers = init.pointers;
    this.documentIndices = init.docIdx;
    this.length = init.total;
    this.vocabSize = init.opts.vocabSize;
    this.eosId = init.opts.eosId;
    const starts: number[] = [];
    for (let d = 0; d + 1 < init.docIdx.length; d++) {
      const s = init.docIdx[d]!;
      if (s < init.lengths.length && (starts.length === 0 || init.pointers[s]! > starts[starts.length - 1]!)) starts.push(init.pointers[s]!);
    }
    if (starts.length === 0 || starts[0] !== 0) starts.unshift(0);
    this.documentStarts = Float64Array.from(starts);
  }

  get sequences(): number {
    return this.sequenceLengths.length;
  }
  get documents(): number {
    return Math.max(0, this.documentIndices.length - 1);
  }

  static open(path: string, opts: MegatronOptions = {}): MegatronDataset {
    const prefix = megatronPrefix(path);
    const idxPath = `${prefix}.idx`;
    const binPath = `${prefix}.bin`;
    if (!existsSync(idxPath) || !existsSync(binPath)) {
      fail('NOT_FOUND', `Megatron dataset ${prefix}: expected both ${binPath} and ${idxPath}; pass the common prefix of a .bin/.idx pair written by Megatron's preprocess_data.py`);
    }
    const idx = readFileSync(idxPath);
    const bad = (what: string): never => fail('BAD_FILE', `${idxPath}: ${what}; the index is corrupt or not a Megatron MMIDIDX index — re-run preprocess_data.py`);
    if (idx.length < 34) bad(`only ${idx.length} bytes, shorter than the 34-byte header`);
    const magic = idx.subarray(0, 9).toString('latin1');
    if (magic !== MEGATRON_MAGIC) bad(`bad magic ${JSON.stringify(magic)}, expected "MMIDIDX\\0\\0"`);
    const dv = new DataView(idx.buffer, idx.byteOffset, idx.length);
    const version = dv.getBigUint64(9, true);
    if (version !== 1n) bad(`version ${version}, only version 1 is supported`);
    const code = dv.getUint8(17);
    const dt = DTYPES[code];
    if (!dt) bad(`unknown dtype code ${code} (1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64, 7 float32, 8 uint16)`);
    if (!dt!.int) fail('BAD_FILE', `${idxPath}: token dtype is ${dt!.name}; token ids must be integers — this is not a token dataset`);
    const S = Number(dv.getBigUint64(18, true));
    const D = Number(dv.getBigUint64(26, true));
    const need = 34 + 4 * S + 8 * S + 8 * D;
    if (idx.length < need) bad(`header says ${S} sequences and ${D} document indices (${need} bytes) but the file has ${idx.length} bytes (truncated)`);
    const lengths = new Int32Array(S);
    const pointers = new Float64Array(S);
    const docIdx = new Float64Array(D);
    let o = 34;
    for (let i = 0; i < S; i++, o += 4) lengths[i] = dv.getInt32(o, true);
    for (let i = 0; i < S; i++, o += 8) pointers[i] = Number(dv.getBigInt64(o, true));
    for (let i = 0; i < D; i++, o += 8) docIdx[i] = Number(dv.getBigInt64(o, true));
    const fd = openSync(binPath, 'r');
    try {
      const binBytes = fstatSync(fd).size;
      // Token offsets: pointers are bytes; sequences must lie back to back for a flat token stream.
      let expect = 0;
      for (let i = 0; i < S; i++) {
        if (lengths[i]! < 0) bad(`sequence ${i} has negative length ${lengths[i]}`);
        if (pointers[i]! !== expect) bad(`sequence ${i} starts at byte ${pointers[i]}, expected ${expect} (sequences must be contiguous)`);
        expect += lengths[i]! * dt!.width;
        pointers[i] = pointers[i]! / dt!.width;
      }
      if (expect !== binBytes) {
        fail('BAD_FILE', `${binPath}: the index describes ${expect} bytes of ${dt!.name} tokens but the file has ${binBytes} bytes; the .bin is truncated or belongs to another .idx`);
      }
      for (let i = 0; i < D; i++) {
        if (docIdx[i]! < 0 || docIdx[i]! > S || (i > 0 && docIdx[i]! < docIdx[i - 1]!)) bad(`document index ${i} = ${docIdx[i]} is not a non-decreasing sequence index in [0, ${S}]`);
      }
      const total = expect / dt!.width;
      if (total === 0) fail('BAD_FILE', `${binPath}: the dataset holds no tokens`);
      return new MegatronDataset({ binPath, idxPath, code, fd, lengths, pointers, docIdx, total, opts });
    } catch (e) {
      closeSync(fd);
      throw e;
    }
  }

  /** Tokens of sequence i. */
  sequence(i: number): Int32Array {
    if (!(i >= 0 && i < this.sequences)) throw new RangeError(`sequence ${i} outside [0, ${this.sequences})`);
    return this.read(this.sequencePointers[i]!, this.sequenceLengths[i]!);
  }

  read(start: number, count: number, out: Int32Array = new Int32Array(count)): Int32Array {
    if (!(start >= 0 && count >= 0 && start + count <= this.length)) throw new RangeError(`${this.path}: read [${start}, ${start + count}) outside [0, ${this.length})`);
    if (this.fd === undefined) throw new Error(`${this.path}: dataset is closed`);
    const w = this.width;
    const nb = count * w;
    if (this.scratch.length < nb) this.scratch = new Uint8Array(nb);
    const bytes = this.scratch.subarray(0, nb);
    let off = 0;
    while (off < nb) {
      const n = readSync(this.fd, bytes, off, nb - off, start * w + off);
      if (n === 0) fail('BAD_FILE', `${this.path}: unexpected end of file at byte ${start * w + off}`);
      off += n;
    }
    const dv = new DataView(bytes.buffer, bytes.byteOffset, nb);
    for (let i = 0; i < count; i++) {
      let v: number;
      switch (this.code) {
        case 1: v = dv.getUint8(i); break;
        case 2: v = dv.getInt8(i); break;
        case 3: v = dv.getInt16(2 * i, true); break;
        case 4: v = dv.getInt32(4 * i, true); break;
        case 5: v = Number(dv.getBigInt64(8 * i, true)); break;
        default: v = dv.getUint16(2 * i, true); break;
      }
      if (v < 0 || (this.vocabSize !== undefined && v >= this.vocabSize) || v > 0x7fffffff) {
        fail('BAD_FILE', `${this.path}: token ${start + i} has id ${v}, outside [0, ${this.vocabSize ?? 2 ** 31}); the dataset was tokenized with another tokenizer or is corrupt`);
      }
      out[i] = v;
    }
    return out;
  }

  close(): void {
    if (this.fd !== undefined) closeSync(this.fd);
    this.fd = undefined;
  }
}

export function openMegatron(path: string, opts?: MegatronOptions): MegatronDataset {
  return MegatronDataset.open(path, opts);
}
