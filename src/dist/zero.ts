/**
 * The distributed optimizer (train.zero 1, Megatron's and ZeRO's stage 1) over the flat parameter
 * buffer (src/nn/params.ts): each rank owns a contiguous range of it, its shard, and keeps the
 * AdamW moments of that range only. A step reduce-scatters the gradients (each rank receives the
 * sum over the ranks of its shard), measures the global gradient norm from the shards' norms,
 * updates its shard, and all-gathers what the layers read (the working copy under a narrower
 * compute dtype, whose f32 masters each rank keeps for its shard only; under f32 the masters).
 *
 * The shards (src/nn/params.ts flatShard) are multiples of PARAM_ALIGN elements long, so each
 * starts on a binding boundary: every rank's is `stride` long in the padded layout the collectives
 * move (worldSize · stride elements, zeros past the flat buffer's end).
 * This module imports no Node built-ins, as collectives.ts.
 */
import type { Backend } from '../backend/backend.js';
import type { FlatShard, ParamStore } from '../nn/params.js';
import { clipScale } from '../ops/grad_norm.js';
import type { Tensor } from '../tensor.js';
import { type Collectives, sumOverRanks } from './collectives.js';

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

/**
 * What the layers read, whole again on every rank after each rank updated its shard: the working
 * copy (bf16, fp16), each rank's shard of it gathered (its f32 masters stay sharded,
 * ParamStore.masterShard), or under f32 the masters themselves, the layers' weights.
 */
export async function allGatherParams(group: Collectives, store: ParamStore, shard: FlatShard): Promise<void> {
  const b = store.backend;
  const work = store.workingCopy;
  if (!work) {
    store.upload(await allGatherShards(group, b, b.view(store.value, shard.offset, [shard.size]), shard));
    return;
  }
  // Float tensors travel as f32 on the host: the working copy's values exactly, uploaded back unchanged.
  b.upload(work, await allGatherShards(group, b, b.view(work, shard.offset, [shard.size]), shard));
}

/** The whole flat buffer of which every rank holds its shard in `part` (a tensor of shard.size f32 elements), on every rank. */
export async function allGatherShards(group: Collectives, backend: Backend, part: Tensor, shard: FlatShard): Promise<Float32Array> {
  const mine = new Float32Array(shard.stride);
  mine.set((await backend.download(part)) as Float32Array);
  const all = await group.allGather(mine);
  return all.subarray(0, shard.total);
}
