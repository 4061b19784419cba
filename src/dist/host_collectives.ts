/**
 * Collectives between the ranks of a job over the store's TCP connections (store.ts): every rank's
 * data goes to rank 0, rank 0 combines it and every rank reads rank 0's bytes back. Reductions run
 * in a fixed order, f32 left to right in rank order ((x0 + x1) + x2 ...), so the result is
 * bit-identical on every rank and in every run with the same inputs.
 *
 * Every rank calls the same collectives in the same order (a call's keys carry its sequence number).
 * Data moves in chunks of at most `chunkElements` floats (16 MiB by default), one chunk at a time, so
 * rank 0 holds at most one chunk per rank. The first chunk of every call carries the array's length:
 * ranks that disagree on it fail together with a message naming both lengths. Floats travel in the
 * host's byte order (little-endian on every machine mdlm runs on).
 */
import type { Backend } from '../backend/backend.js';
import { MdlmError } from '../errors.js';
import type { Tensor } from '../tensor.js';
import { type Collectives, type ReduceOp, allReduceOnHost } from './collectives.js';
import type { Store } from './store.js';

/** 16 MiB of f32: the largest piece one message carries. */
export const DEFAULT_CHUNK_ELEMENTS = 4 << 20;

/**
 * The elements [start, end) of rank `rank`'s shard of `length` elements split over `worldSize` ranks:
 * contiguous, in rank order, the first `length % worldSize` ranks one element longer than the rest.
 */
export function shardRange(length: number, worldSize: number, rank: number): { start: number; end: number } {
  const base = Math.floor(length / worldSize);
  const extra = length % worldSize;
  const start = rank * base + Math.min(rank, extra);
  return { start, end: start + base + (rank < extra ? 1 : 0) };
}

const OK = 0;
const ERROR = 1;

/** A piece on the wire: u8 status | u32 total length of the array | the floats (or, on error, a UTF-8 message). */
function piece(total: number, data: Float32Array): Uint8Array {
  const out = new Uint8Array(5 + data.byteLength);
  const view = new DataView(out.buffer);
  view.setUint8(0, OK);
  view.setUint32(1, total, true);
  out.set(new Uint8Array(data.buffer, data.byteOffset, data.byteLength), 5);
  return out;
}

function errorPiece(message: string): Uint8Array {
  const text = new TextEncoder().encode(message);
  const out = new Uint8Array(5 + text.length);
  out[0] = ERROR;
  out.set(text, 5);
  return out;
}

interface Piece {
  readonly total: number;
  readonly data: Float32Array;
}

function chunkCount(length: number, chunk: number): number {
  return Math.max(1, Math.ceil(length / chunk));
}

export class HostGroup implements Collectives {
  private seq = 0;

  constructor(
    readonly store: Store,
    /** Floats per message; every rank must use the same value. */
    readonly chunkElements = DEFAULT_CHUNK_ELEMENTS,
  ) {}

  get rank(): number {
    return this.store.rank;
  }

  get worldSize(): number {
    return this.store.worldSize;
  }

  private fail(what: string, why: string): never {
    throw new MdlmError('IO_ERROR', `rank ${this.rank}, ${what}: ${why}`);
  }

  /** A piece read from the store; an error piece (rank 0 found the ranks disagreeing) throws. */
  private async read(key: string, what: string): Promise<Piece> {
    const b = await this.store.get(key, what);
    if (b[0] === ERROR) this.fail(what, b.toString('utf8', 5));
    const data = new Float32Array((b.length - 5) / 4);
    new Uint8Array(data.buffer).set(b.subarray(5));
    return { total: b.readUInt32LE(1), data };
  }

  /** Rank 0: the chunk [a, b) of every rank's array in rank order (its own first), or the disagreement. */
  private async gather(key: (r: number) => string, total: number, mine: Float32Array, what: string): Promise<Float32Array[] | string> {
    const parts = [mine];
    for (let r = 1; r < this.worldSize; r++) {
      const p = await this.read(key(r), `${what}: waiting for rank ${r}'s data`);
      if (p.total !== total) return `rank ${r} passes ${p.total} elements, rank 0 passes ${total}`;
      parts.push(p.data);
    }
    return parts;
  }

  private static reduce(parts: readonly Float32Array[], op: ReduceOp): Float32Array {
    const acc = Float32Array.from(parts[0]!);
    for (let r = 1; r < parts.length; r++) {
      const x = parts[r]!;
      // A Float32Array store rounds each f64 sum of two f32 values to f32: exactly f32 addition.
      if (op === 'sum') for (let i = 0; i < acc.length; i++) acc[i]! += x[i]!;
      else for (let i = 0; i < acc.length; i++) acc[i] = Math.max(acc[i]!, x[i]!);
    }
    return acc;
  }

  /** Replaces `data` on every rank by the element-wise sum (or max) over the ranks, reduced in rank order; NaN anywhere gives NaN. */
  async allReduce(data: Float32Array, op: ReduceOp = 'sum'): Promise<void> {
    const id = `mdlm/c${this.seq++}`;
    const what = `allReduce #${id.slice(6)} (${op}, ${data.length} elements)`;
    const C = this.chunkElements;
    for (let c = 0; c < chunkCount(data.length, C); c++) {
      const chunk = data.subarray(c * C, Math.min(data.length, (c + 1) * C));
      const inKey = (r: number): string => `${id}/${c}/in/${r}`;
      const outKey = `${id}/${c}/out`;
      if (this.rank === 0) {
        const parts = await this.gather(inKey, data.length, chunk, `${what}, chunk ${c}`);
        if (typeof parts === 'string') {
          await this.store.set(outKey, errorPiece(parts), this.worldSize - 1, `${what}, chunk ${c}: sending the disagreement`);
          this.fail(what, parts);
        }
        const sum = HostGroup.reduce(parts, op);
        if (this.worldSize > 1) await this.store.set(outKey, piece(data.length, sum), this.worldSize - 1, `${what}, chunk ${c}: sending the result`);
        chunk.set(sum);
      } else {
        await this.store.set(inKey(this.rank), piece(data.length, chunk), 1, `${what}, chunk ${c}: sending this rank's data`);
        chunk.set((await this.read(outKey, `${what}, chunk ${c}: waiting for the result from rank 0`)).data);
      }
    }
  }

  /** allReduce of a device tensor: downloaded, reduced here, uploaded (allReduceOnHost). */
  allReduceTensor(backend: Backend, t: Tensor, op: ReduceOp = 'sum'): Promise<void> {
    return allReduceOnHost(this, backend, t, op);
  }

  /** Copies rank `root`'s `data` into every rank's `data` (all ranks pass arrays of one length). */
  async broadcast(data: Float32Array, root = 0): Promise<void> {
    const id = `mdlm/c${this.seq++}`;
    const what = `broadcast #${id.slice(6)} from rank ${root} (${data.length} elements)`;
    const C = this.chunkElements;
    for (let c = 0; c < chunkCount(data.length, C); c++) {
      const chunk = data.subarray(c * C, Math.min(data.length, (c + 1) * C));
      const key = `${id}/${c}`;
      if (this.rank === root) {
        if (this.worldSize > 1) await this.store.set(key, piece(data.length, chunk), this.worldSize - 1, `${what}, chunk ${c}: sending this rank's data`);
      } else {
        const p = await this.read(key, `${what}, chunk ${c}: waiting for rank ${root}'s data`);
        if (p.total !== data.length) this.fail(what, `rank ${root} sends ${p.total} elements, this rank expects ${data.length}`);
        chunk.set(p.data);
      }
    }
  }

  /** Every rank's `data` (all of one length), concatenated in rank order, on every rank. */
  async allGather(data: Float32Array): Promise<Float32Array> {
    const id = `mdlm/c${this.seq++}`;
    const what = `allGather #${id.slice(6)} (${data.length} elements a rank)`;
    const n = data.length;
    const out = new Float32Array(n * this.worldSize);
    out.set(data, this.rank * n);
    const C = this.chunkElements;
    for (let c = 0; c < chunkCount(n, C); c++) {
      const a = c * C;
      const b = Math.min(n, a + C);
      if (this.worldSize > 1) await this.store.set(`${id}/${c}/${this.rank}`, piece(n, data.subarray(a, b)), this.worldSize - 1, `${what}, chunk ${c}: sending this rank's data`);
      for (let r = 0; r < this.worldSize; r++) {
        if (r === this.rank) continue;
        const p = await this.read(`${id}/${c}/${r}`, `${what}, chunk ${c}: waiting for rank ${r}'s data`);
        if (p.total !== n) this.fail(what, `rank ${r} passes ${p.total} elements, this rank ${n}`);
        out.set(p.data, r * n + a);
      }
    }
    return out;
  }

  /**
   * This rank's shard (shardRange) of the element-wise sum (or max) over the ranks of `data`, reduced
   * in rank order as allReduce does: the same bytes allReduce gives for those elements.
   */
  async reduceScatter(data: Float32Array, op: ReduceOp = 'sum'): Promise<Float32Array> {
    const id = `mdlm/c${this.seq++}`;
    const what = `reduceScatter #${id.slice(6)} (${op}, ${data.length} elements)`;
    const W = this.worldSize;
    const mine = shardRange(data.length, W, this.rank);
    const out = new Float32Array(mine.end - mine.start);
    const C = this.chunkElements;
    for (let c = 0; c < chunkCount(data.length, C); c++) {
      const a = c * C;
      const b = Math.min(data.length, a + C);
      const chunk = data.subarray(a, b);
      const inKey = (r: number): string => `${id}/${c}/in/${r}`;
      // Every rank reads chunk 0's answer (empty if its shard lies elsewhere), so a disagreement reaches all.
      const reads = (r: number): boolean => {
        const s = shardRange(data.length, W, r);
        return c === 0 || (s.start < b && s.end > a);
      };
      const toKey = (r: number): string => `${id}/${c}/to/${r}`;
      if (this.rank === 0) {
        const parts = await this.gather(inKey, data.length, chunk, `${what}, chunk ${c}`);
        if (typeof parts === 'string') {
          for (let r = 1; r < W; r++) await this.store.set(toKey(r), errorPiece(parts), 1, `${what}, chunk ${c}: sending the disagreement`);
          this.fail(what, parts);
        }
        const sum = HostGroup.reduce(parts, op);
        for (let r = 0; r < W; r++) {
          if (!reads(r)) continue;
          const s = shardRange(data.length, W, r);
          const lo = Math.max(a, s.start);
          const hi = Math.max(lo, Math.min(b, s.end));
          const part = sum.subarray(lo - a, hi - a);
          if (r === 0) out.set(part, lo - s.start);
          else await this.store.set(toKey(r), piece(data.length, part), 1, `${what}, chunk ${c}: sending rank ${r}'s shard`);
        }
      } else {
        await this.store.set(inKey(this.rank), piece(data.length, chunk), 1, `${what}, chunk ${c}: sending this rank's data`);
        if (reads(this.rank)) {
          const p = await this.read(toKey(this.rank), `${what}, chunk ${c}: waiting for this rank's shard from rank 0`);
          out.set(p.data, Math.max(a, mine.start) - mine.start);
        }
      }
    }
    return out;
  }

  /** Waits until every rank has called barrier() as often as this one. */
  async barrier(): Promise<void> {
    await this.store.barrier(`mdlm/c${this.seq++}/barrier`);
  }
}
