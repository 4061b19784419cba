/**
 * The distributed optimizer (train.zero 1, Megatron's and ZeRO's stage 1) over the flat parameter
 * buffer (src/nn/params.ts): each rank owns a contiguous range of it, its shard, and keeps the
 * AdamW moments of that range only. A step reduce-scatters the gradients (each rank receives the
 * sum over the ranks of its shard), measures the global gradient norm from the shards' norms,
 * updates its shard, and all-gathers the updated f32 weights, so every rank's weights (and their
 * working copy) are whole again for the next forward.
 *
 * The shards are multiples of PARAM_ALIGN elements long, so each starts on a binding boundary:
 * every rank's is `stride` long in the padded layout the collectives move (worldSize · stride
 * elements, zeros past the flat buffer's end), the last ranks' cut short by that end.
 * This module imports no Node built-ins, as collectives.ts.
 */
import type { Backend } from '../backend/backend.js';
import { MdlmError } from '../errors.js';
import { PARAM_ALIGN, type ParamStore } from '../nn/params.js';
import { clipScale } from '../ops/grad_norm.js';
import type { Tensor } from '../tensor.js';
import { type Collectives, sumOverRanks } from './collectives.js';

/** A rank's range [offset, offset + size) of a flat buffer of `total` elements; `stride`: every rank's padded shard length. */
export interface FlatShard {
  readonly offset: number;
  readonly size: number;
  readonly stride: number;
  readonly total: number;
}

/** Rank `rank`'s shard of a flat buffer of `total` elements (a multiple of PARAM_ALIGN) over `worldSize` ranks. */
export function flatShard(total: number, worldSize: number, rank: number): FlatShard {
  const stride = Math.ceil(total / (PARAM_ALIGN * worldSize)) * PARAM_ALIGN;
  const offset = Math.min(total, rank * stride);
  const size = Math.min(total, offset + stride) - offset;
  if (size === 0) {
    throw new MdlmError('BAD_CONFIG', `train.zero: the model's ${total} flat parameter elements leave rank ${rank} of ${worldSize} no shard of ${PARAM_ALIGN}-element blocks; use train.zero 0 or fewer ranks`);
  }
  return { offset, size, stride, total };
}

/** The whole buffer as one rank's shard (train.zero 0, or one process). */
export function wholeShard(total: number): FlatShard {
  return { offset: 0, size: total, stride: total, total };
}

/**
 * Each rank's shard of the gradients summed over the ranks, written over that range of
 * `store.grad` (the rest of the buffer keeps this rank's own gradients, which nothing reads
 * before the next backward overwrites them). The sum is allReduce's: the same bytes for the shard.
 */
export async function reduceScatterGrads(group: Collectives, store: ParamStore, shard: FlatShard): Promise<void> {
  const b = store.backend;
  const padded = new Float32Array(shard.stride * group.worldSize);
  padded.set((await b.download(store.grad)) as Float32Array);
  const mine = await group.reduceScatter(padded);
  b.upload(b.view(store.grad, shard.offset, [shard.size]), mine.subarray(0, shard.size));
}

/**
 * The global gradient norm from grad_norm's output over each rank's shard ([shard norm, clip]):
 * the square root of the f64 sum over the ranks of the shards' squared norms, and its clip
 * coefficient (grad_norm's formula, times `gradScale`), written back over `normOut` for adamw.
 * A NaN or an infinity on one rank's shard is in every rank's norm.
 */
export async function globalNorm(group: Collectives, backend: Backend, normOut: Tensor, maxNorm: number, gradScale: number): Promise<void> {
  const [shardNorm] = (await backend.download(normOut)) as Float32Array;
  const [squares] = await sumOverRanks(group, [shardNorm! * shardNorm!]);
  const norm = Math.sqrt(squares!);
  backend.upload(normOut, Float32Array.of(norm, gradScale * clipScale(norm, maxNorm)));
}

/** Every rank's shard of the f32 weights, gathered into every rank's whole buffer (and its working copy re-derived from it). */
export async function allGatherParams(group: Collectives, store: ParamStore, shard: FlatShard): Promise<void> {
  const all = await allGatherShards(group, store.backend, store.backend.view(store.value, shard.offset, [shard.size]), shard);
  store.upload(all);
}

/** The whole flat buffer of which every rank holds its shard in `part` (a tensor of shard.size f32 elements), on every rank. */
export async function allGatherShards(group: Collectives, backend: Backend, part: Tensor, shard: FlatShard): Promise<Float32Array> {
  const mine = new Float32Array(shard.stride);
  mine.set((await backend.download(part)) as Float32Array);
  const all = await group.allGather(mine);
  return all.subarray(0, shard.total);
}
