/**
 * AdamW over the flat parameter buffers: one global gradient norm (with the clip coefficient
 * computed on the device, so clipping needs no host round-trip; a loss scale the gradients carry
 * is undone there too), then the fused update. Under
 * mixed precision the update also writes the working copy (adamw_cast), so it needs no cast pass
 * of its own.
 *
 * The learning rate and bias corrections live on the device (`schedule`, adamw's `sched`), so the
 * update's ops are the same every step and a step can queue its update into the next step's
 * recorded pass (`defer`, `takeDeferred`): it then runs chunk by chunk in the order the forward
 * reads the parameters, first in that pass's graph.
 */
import type { Backend } from '../backend/backend.js';
import type { PassPrelude } from '../model/llama.js';
import { type FlatShard, type Param, type ParamStore, wholeShard } from '../nn/params.js';
import { type AdamwAttrs, adamw, adamwCast, adamwSchedule } from '../ops/adamw.js';
import { gradNorm } from '../ops/grad_norm.js';
import type { Tensor } from '../tensor.js';

export interface AdamWOptions {
  readonly beta1: number;
  readonly beta2: number;
  readonly eps: number;
  readonly weightDecay: number;
  /** Clip the global gradient norm to this; 0 disables clipping. */
  readonly gradClip: number;
  /**
   * The range of the flat buffers this optimizer updates and keeps moments for (train.zero 1: this
   * rank's shard, src/dist/zero.ts; the store's masterShard where it keeps only that shard's
   * masters); default the whole of them.
   */
  readonly shard?: FlatShard;
}

/** A contiguous range of the flat buffers that one adamw op updates. */
interface UpdateChunk {
  readonly offset: number;
  readonly size: number;
  readonly weightDecay: number;
}

/** The transformer layer a parameter belongs to ('layers.3.' for 'layers.3.attn.wq'), else its own name. */
function layerOf(p: Param): string {
  return /^layers\.\d+\./.exec(p.name)?.[0] ?? p.name;
}

/**
 * The update's chunks in the order a forward pass first reads them: the parameters without decay
 * (the norms and biases: small, and the first layer's first op reads one) in one chunk, then the
 * decayed ones in declaration order, one chunk per layer (adjacent in the flat buffer: the
 * norms are stored after all of them).
 */
export function updateChunks(store: ParamStore, weightDecay: number): UpdateChunk[] {
  const chunks: UpdateChunk[] = [];
  const rest = store.noDecayRange;
  if (rest.size > 0) chunks.push({ offset: rest.offset, size: rest.size, weightDecay: 0 });
  // Each decayed parameter's extent, padding included: up to the next one, the last to the range's end.
  const decayed = store.list.filter((p) => p.decay);
  const byOffset = [...decayed].sort((a, b) => a.offset - b.offset);
  const end = new Map(byOffset.map((p, i) => [p, byOffset[i + 1]?.offset ?? store.decayRange.offset + store.decayRange.size]));
  let open: { offset: number; size: number; layer: string } | undefined;
  for (const p of decayed) {
    const layer = layerOf(p);
    if (open && open.layer === layer && open.offset + open.size === p.offset) {
      open.size = end.get(p)! - open.offset;
      continue;
    }
    if (open) chunks.push({ offset: open.offset, size: open.size, weightDecay });
    open = { offset: p.offset, size: end.get(p)! - p.offset, layer };
  }
  if (open) chunks.push({ offset: open.offset, size: open.size, weightDecay });
  return chunks;
}

/** The parts of `chunks` inside `shard`, in their order. */
export function chunksIn(chunks: readonly UpdateChunk[], shard: FlatShard): UpdateChunk[] {
  const end = shard.offset + shard.size;
  return chunks.flatMap((c) => {
    const lo = Math.max(c.offset, shard.offset);
    const hi = Math.min(c.offset + c.size, end);
    return hi > lo ? [{ offset: lo, size: hi - lo, weightDecay: c.weightDecay }] : [];
  });
}

export class AdamW {
  /** The moments of the shard's elements (the whole buffer's unless opts.shard says otherwise). */
  readonly m: Tensor;
  readonly v: Tensor;
  /** The range of the flat buffers this optimizer updates. */
  readonly shard: FlatShard;
  /** [norm, clip scale] of the last step's gradient (grad_norm's out: unscaled by gradScale). */
  readonly normOut: Tensor;
  /** 1 / the loss scale the gradients carry (1 without loss scaling): grad_norm's gradScale. */
  readonly gradScale: Tensor;
  /** adamw's sched for the next update: [lr, lr / (1 − β1^step), 1 / √(1 − β2^step)]. */
  readonly schedule: Tensor;
  /** The host copy of gradScale's value. */
  private lossScale = 1;
  private readonly backend: Backend;
  /** The update's ops, a chunk each (updateChunks), with their views made once. */
  private readonly updates: readonly { op: typeof adamw; args: Record<string, Tensor>; attrs: AdamwAttrs }[];
  /** An update is deferred: its schedule is on the device, its ops not yet queued. */
  private pending = false;

  constructor(readonly store: ParamStore, readonly opts: AdamWOptions) {
    const b = store.backend;
    this.backend = b;
    const shard = opts.shard ?? wholeShard(store.size);
    this.shard = shard;
    // Sharded masters (ParamStore.masterShard) are this shard's: their buffer starts at its offset.
    const masters = store.masterShard;
    if (masters.size < masters.total && (masters.offset !== shard.offset || masters.size !== shard.size)) {
      throw new Error(`AdamW: the store keeps the masters of [${masters.offset}, ${masters.offset + masters.size}), the optimizer's shard is [${shard.offset}, ${shard.offset + shard.size})`);
    }
    this.m = b.alloc([shard.size], 'f32');
    this.v = b.alloc([shard.size], 'f32');
    b.zero(this.m);
    b.zero(this.v);
    this.normOut = b.alloc([2], 'f32');
    this.gradScale = b.alloc([1], 'f32');
    b.upload(this.gradScale, Float32Array.of(1));
    this.schedule = b.alloc([3], 'f32');
    const { beta1, beta2, eps } = opts;
    const work = store.workingCopy;
    this.updates = chunksIn(updateChunks(store, opts.weightDecay), shard).map(({ offset, size, weightDecay }) => {
      const view = (t: Tensor, from = offset): Tensor => b.view(t, from, [size]);
      const moment = (t: Tensor): Tensor => view(t, offset - shard.offset);
      const args = { param: view(store.value, offset - masters.offset), grad: view(store.grad), m: moment(this.m), v: moment(this.v), clip: this.normOut, sched: this.schedule };
      const attrs = { n: size, beta1, beta2, eps, weightDecay };
      return work ? { op: adamwCast, args: { ...args, work: view(work) }, attrs } : { op: adamw, args, attrs };
    });
  }

  /** Compute the gradient norm of the accumulated gradients of the shard (before `update`): the global one for the whole buffer. */
  measure(): void {
    const b = this.backend;
    const { offset, size, total } = this.shard;
    const x = size === total ? this.store.grad : b.view(this.store.grad, offset, [size]);
    b.run(gradNorm, { x, gradScale: this.gradScale, out: this.normOut }, { n: size, maxNorm: this.opts.gradClip });
  }

  /** 1 / the loss scale the gradients carry (setLossScale). */
  get gradScaleValue(): number {
    return 1 / this.lossScale;
  }

  /**
   * The loss scale the gradients of the steps from now on carry (train.precision fp16): the norm,
   * the clipping and the update see them divided by it. A power of two, so the division is exact.
   */
  setLossScale(scale: number): void {
    this.lossScale = scale;
    this.backend.upload(this.gradScale, Float32Array.of(1 / scale));
  }

  /** Apply one update with learning rate `lr` at 1-based `step` (bias correction) now. */
  update(lr: number, step: number): void {
    this.flush();
    this.setSchedule(lr, step);
    this.apply();
  }

  /**
   * The update with learning rate `lr` at 1-based `step`, from the gradients and norm as they
   * are now, left for the next pass to queue first (`takeDeferred`), or for `flush`. Nothing
   * may write the gradients or the norm before then but that pass (whose forward comes first).
   */
  defer(lr: number, step: number): void {
    this.flush();
    this.setSchedule(lr, step);
    this.pending = true;
  }

  /** The deferred update, as the prelude of the pass that takes it over; undefined when none is deferred. */
  takeDeferred(): PassPrelude | undefined {
    if (!this.pending) return undefined;
    this.pending = false;
    return { key: 'adamw', run: () => this.apply() };
  }

  /** Queue the deferred update, if any, now: before anything reads the parameters or the optimizer state. */
  flush(): void {
    if (!this.pending) return;
    this.pending = false;
    this.apply();
  }

  private setSchedule(lr: number, step: number): void {
    this.backend.upload(this.schedule, adamwSchedule(lr, step, this.opts.beta1, this.opts.beta2));
  }

  private apply(): void {
    for (const { op, args, attrs } of this.updates) this.backend.run(op, args, attrs);
    this.store.workingCopyWritten(true);
  }

  destroy(): void {
    for (const t of [this.m, this.v, this.normOut, this.gradScale, this.schedule]) this.backend.free(t);
  }
}
