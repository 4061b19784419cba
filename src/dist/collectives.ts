/**
 * What the trainer asks of the other ranks of a job: the collectives interface and the world of
 * one. This module imports no Node built-ins (the trainer's core runs in a browser too); the host
 * transport over TCP (host_collectives.ts) and the job's joining (world.ts) are Node's side.
 *
 * Every rank calls the same collectives in the same order. Results are the same bytes on every
 * rank, so ranks that start equal stay equal.
 */
import type { Backend } from '../backend/backend.js';
import type { Tensor } from '../tensor.js';

export type ReduceOp = 'sum' | 'max';

export interface Collectives {
  readonly rank: number;
  readonly worldSize: number;
  /** Replaces `data` on every rank by the element-wise sum (or max) over the ranks; NaN anywhere gives NaN. */
  allReduce(data: Float32Array, op?: ReduceOp): Promise<void>;
  /** allReduce over an f32 tensor of `backend`, in place on the device. */
  allReduceTensor(backend: Backend, t: Tensor, op?: ReduceOp): Promise<void>;
  /** Copies rank `root`'s `data` into every rank's `data` (arrays of one length). */
  broadcast(data: Float32Array, root?: number): Promise<void>;
  /** Every rank's `data` (all of one length), concatenated in rank order. */
  allGather(data: Float32Array): Promise<Float32Array>;
  /**
   * This rank's shard of the element-wise sum (or max) over the ranks of `data` (every rank's of one
   * length): the elements [r·n/W, (r+1)·n/W) for a length n that W divides (else the first n mod W
   * ranks one longer), the same bytes allReduce gives for them.
   */
  reduceScatter(data: Float32Array, op?: ReduceOp): Promise<Float32Array>;
  /** Waits until every rank has called barrier() as often as this one. */
  barrier(): Promise<void>;
}

/**
 * allReduceTensor over the host: download, reduce on the host, upload (one message train per call,
 * whatever the tensor's size). The transport of backends without one of their own (NCCL).
 */
export async function allReduceOnHost(group: Collectives, backend: Backend, t: Tensor, op: ReduceOp = 'sum'): Promise<void> {
  if (t.dtype !== 'f32') throw new Error(`allReduceTensor: ${t} is ${t.dtype}; the host transport reduces f32 tensors`);
  const host = (await backend.download(t)) as Float32Array;
  await group.allReduce(host, op);
  backend.upload(t, host);
}

/** The world of one process: every collective leaves its data as it is, at no cost (no copy, no download). */
export const SOLO: Collectives = {
  rank: 0,
  worldSize: 1,
  allReduce: async () => {},
  allReduceTensor: async () => {},
  broadcast: async () => {},
  /** The array itself: the concatenation of one array. */
  allGather: async (data) => data,
  /** The array itself: the whole sum is the one rank's shard. */
  reduceScatter: async (data) => data,
  barrier: async () => {},
};

/**
 * The sums over the ranks of `values`, each an f64 summed in rank order, the same on every rank.
 * The values travel as their f64 bytes (an all-gather moves bytes untouched), so nothing is
 * rounded to f32 on the way: losses, token counts and votes.
 */
export async function sumOverRanks(group: Collectives, values: readonly number[]): Promise<number[]> {
  if (group.worldSize === 1) return [...values];
  const n = values.length;
  const mine = Float64Array.from(values);
  const all = await group.allGather(new Float32Array(mine.buffer));
  const f64 = new Float64Array(all.buffer, all.byteOffset, all.length / 2);
  const out = new Array<number>(n).fill(0);
  for (let r = 0; r < group.worldSize; r++) for (let i = 0; i < n; i++) out[i]! += f64[r * n + i]!;
  return out;
}
