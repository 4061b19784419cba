/**
 * Parameters, their gradients and optimizer state live in flat device buffers; layers hold views.
 * Master values and gradients are f32. Under a narrower compute dtype (bf16) a working copy of the
 * values in that dtype, same layout, is what the layers read; `refreshCompute` re-derives it with
 * one cast after the masters are set (init, load), and the optimizer step writes it as it updates
 * them (adamw_cast).
 * Views start on 64-element (256-byte) boundaries, as WebGPU storage bindings require. Decayed
 * parameters come first and the rest (norms) after, so AdamW runs on two ranges without a mask
 * and the global gradient norm is one reduction over the whole gradient buffer.
 * Under the distributed optimizer (train.zero 1) with a narrower compute dtype, each rank keeps the
 * f32 masters of its shard of the flat buffer only (`masterShard`); the working copy and the
 * gradients stay whole.
 */
import type { Backend } from '../backend/backend.js';
import { fail } from '../errors.js';
import { PhiloxStream, RngPurpose } from '../rng/philox.js';
import { cast } from '../ops/cast.js';
import { type FloatDType, type Shape, type Tensor, numel } from '../tensor.js';

/** Parameters start on 64-element boundaries in the flat buffers (WebGPU binding alignment). */
export const PARAM_ALIGN = 64;

export type ParamInit = { readonly kind: 'normal'; readonly std: number } | { readonly kind: 'ones' } | { readonly kind: 'zeros' };

export interface ParamSpec {
  readonly name: string;
  readonly shape: Shape;
  readonly init: ParamInit;
  readonly decay: boolean;
}

export interface Param extends ParamSpec {
  readonly offset: number; // elements into the flat buffers
  /** The store it lives in (whose pass decides whether a gradient write adds: `accumulates`). */
  readonly store: ParamStore;
  /** The f32 master value. */
  value: Tensor;
  /** The f32 gradient. */
  grad: Tensor;
  /** What the layers compute with: the working copy in the compute dtype (the master under f32). */
  compute: Tensor;
}

/** A contiguous range of the flat buffers: all decayed parameters, then all others. */
export interface ParamRange {
  readonly offset: number;
  readonly size: number;
}

/** A rank's range [offset, offset + size) of a flat buffer of `total` elements; `stride`: every rank's padded shard length. */
export interface FlatShard {
  readonly offset: number;
  readonly size: number;
  readonly stride: number;
  readonly total: number;
}

/**
 * Rank `rank`'s shard of a flat buffer of `total` elements (a multiple of PARAM_ALIGN) over
 * `worldSize` ranks: contiguous, in rank order, each `stride` long (a multiple of PARAM_ALIGN, so
 * every shard starts on a binding boundary), the last ones cut short by the buffer's end.
 */
export function flatShard(total: number, worldSize: number, rank: number): FlatShard {
  const stride = Math.ceil(total / (PARAM_ALIGN * worldSize)) * PARAM_ALIGN;
  const offset = Math.min(total, rank * stride);
  const size = Math.min(total, offset + stride) - offset;
  if (size === 0) {
    fail('BAD_CONFIG', `train.zero: the model's ${total} flat parameter elements leave rank ${rank} of ${worldSize} no shard of ${PARAM_ALIGN}-element blocks; use train.zero 0 or fewer ranks`);
  }
  return { offset, size, stride, total };
}

/** The whole buffer as one rank's shard (train.zero 0, or one process). */
export function wholeShard(total: number): FlatShard {
  return { offset: 0, size: total, stride: total, total };
}

/** A rank among the ranks the f32 masters are sharded over. */
export interface MasterRanks {
  readonly worldSize: number;
  readonly rank: number;
}

export class ParamStore {
  private readonly specs: ParamSpec[] = [];
  private params: Param[] | null = null;
  private flatValue: Tensor | null = null;
  private flatGrad: Tensor | null = null;
  private flatCompute: Tensor | null = null;
  private ranges: { decay: ParamRange; noDecay: ParamRange } | null = null;
  private shard: FlatShard | null = null;
  /** What runs after the working copy is written (onWorkingCopy). */
  private readonly copyListeners: ((updated: boolean) => void)[] = [];
  /** The parameters whose gradient the current overwriting pass has written (beginGradients). */
  private written: Set<Param> | null = null;

  /**
   * `masterRanks`: the f32 masters are sharded over these ranks, this process keeping its shard's
   * (train.zero 1), where the layers read a working copy (a compute dtype other than f32); under
   * f32 the masters are what the layers read, and stay whole.
   */
  constructor(readonly backend: Backend, readonly computeDtype: FloatDType = 'f32', private readonly masterRanks: MasterRanks | null = null) {}

  /** Declare a parameter; its tensors exist after `materialize`. */
  declare(name: string, shape: Shape, init: ParamInit, decay: boolean): Param {
    if (this.params) throw new Error(`ParamStore: '${name}' declared after materialize()`);
    if (this.specs.some((s) => s.name === name)) throw new Error(`ParamStore: duplicate parameter '${name}'`);
    const spec = { name, shape, init, decay };
    this.specs.push(spec);
    // Filled in by materialize(); layers keep the object and read .value/.grad later.
    return spec as unknown as Param;
  }

  /**
   * Allocate the flat buffers, give every parameter its views, and initialise from `seed` (through
   * `fill`). `fill` null leaves the values unset: for a model whose values are loaded next
   * (loadParams), or built against an allocation plan (src/model/plan.ts), computing none.
   */
  materialize(seed: number, fill: ParamFiller | null = fillSequential): void {
    if (this.params) throw new Error('ParamStore: materialize() called twice');
    const ordered = [...this.specs.filter((s) => s.decay), ...this.specs.filter((s) => !s.decay)];
    let size = 0;
    let decayEnd = 0;
    const offsets = new Map<ParamSpec, number>();
    for (const s of ordered) {
      offsets.set(s, size);
      size += Math.ceil(numel(s.shape) / PARAM_ALIGN) * PARAM_ALIGN;
      if (s.decay) decayEnd = size;
    }
    size = Math.max(size, PARAM_ALIGN);
    const b = this.backend;
    const ranks = this.computeDtype === 'f32' ? null : this.masterRanks;
    const shard = ranks ? flatShard(size, ranks.worldSize, ranks.rank) : wholeShard(size);
    this.shard = shard;
    const sharded = shard.size < size;
    const value = b.alloc([shard.size], 'f32');
    const grad = b.alloc([size], 'f32');
    this.flatValue = value;
    this.flatGrad = grad;
    const work = this.computeDtype === 'f32' ? value : b.alloc([size], this.computeDtype);
    if (work !== value) this.flatCompute = work;
    this.ranges = { decay: { offset: 0, size: Math.max(decayEnd, 0) }, noDecay: { offset: decayEnd, size: size - decayEnd } };
    const jobs: InitJob[] = [];
    this.params = this.specs.map((spec, index) => {
      const offset = offsets.get(spec)!;
      const p = spec as Param;
      Object.assign(p, { offset, store: this, grad: b.view(grad, offset, spec.shape), compute: b.view(work, offset, spec.shape) });
      if (!sharded) p.value = b.view(value, offset, spec.shape);
      else {
        Object.defineProperty(p, 'value', {
          get: () => {
            throw new Error(`ParamStore: '${spec.name}' has no master view: the f32 masters are sharded (train.zero 1), this rank holding [${shard.offset}, ${shard.offset + shard.size}) of the flat buffer (masterShard)`);
          },
        });
      }
      jobs.push({ offset, n: numel(spec.shape), init: spec.init, index });
      return p;
    });
    if (fill) this.upload(fill(size, jobs, seed));
    this.zeroGrads();
  }

  /**
   * Set every master value from a host array of the whole flat layout (and the working copy from
   * it). Sharded masters take their shard's range; the whole working copy is cast on the device
   * from the host values staged in the gradient buffer (which holds nothing between steps),
   * which is zeroed after.
   */
  upload(host: Float32Array): void {
    const shard = this.masterShard;
    if (shard.size === shard.total) {
      this.backend.upload(this.value, host);
      this.refreshCompute();
      return;
    }
    this.backend.upload(this.value, host.subarray(shard.offset, shard.offset + shard.size));
    this.backend.upload(this.grad, host);
    this.castToWorkingCopy(this.grad);
    this.zeroGrads();
  }

  /** Re-derive the working copy from the masters (a no-op under f32, where they are one buffer). */
  refreshCompute(): void {
    const shard = this.masterShard;
    if (shard.size < shard.total) throw new Error('ParamStore.refreshCompute: the masters are sharded; upload whole values, or gather the working copy');
    this.castToWorkingCopy(this.value);
  }

  private castToWorkingCopy(from: Tensor): void {
    const work = this.flatCompute;
    if (work) this.backend.run(cast, { x: from, out: work }, { n: work.size, from: 'f32', to: this.computeDtype });
    this.workingCopyWritten(false);
  }

  /** The range of the flat buffer whose f32 masters this store keeps (`value`): the whole of it unless sharded (train.zero 1). */
  get masterShard(): FlatShard {
    if (!this.shard) throw new Error('ParamStore: not materialized');
    return this.shard;
  }

  /**
   * `fn` is queued whenever the working copy has been written: by an optimizer update (`updated`)
   * or from the masters (init, load). Copies derived from it (FP8 weights) follow it this way.
   */
  onWorkingCopy(fn: (updated: boolean) => void): void {
    this.copyListeners.push(fn);
  }

  /** Queue the onWorkingCopy listeners: the working copy has just been written (the optimizer calls this after its update). */
  workingCopyWritten(updated: boolean): void {
    for (const fn of this.copyListeners) fn(updated);
  }

  get list(): readonly Param[] {
    if (!this.params) throw new Error('ParamStore: not materialized');
    return this.params;
  }

  /** The flat working copy in the compute dtype; null under f32, where the layers read the masters. */
  get workingCopy(): Tensor | null {
    if (!this.flatValue) throw new Error('ParamStore: not materialized');
    return this.flatCompute;
  }

  /** The f32 masters: of the whole flat buffer, or of masterShard's range only. */
  get value(): Tensor {
    if (!this.flatValue) throw new Error('ParamStore: not materialized');
    return this.flatValue;
  }

  /** Elements in the flat buffers (padding included). */
  get size(): number {
    return this.grad.size;
  }

  get grad(): Tensor {
    if (!this.flatGrad) throw new Error('ParamStore: not materialized');
    return this.flatGrad;
  }

  get decayRange(): ParamRange {
    if (!this.ranges) throw new Error('ParamStore: not materialized');
    return this.ranges.decay;
  }

  get noDecayRange(): ParamRange {
    if (!this.ranges) throw new Error('ParamStore: not materialized');
    return this.ranges.noDecay;
  }

  /** Number of parameter values (excluding alignment padding). */
  get count(): number {
    return this.specs.reduce((n, s) => n + numel(s.shape), 0);
  }

  find(name: string): Param {
    return this.list.find((p) => p.name === name) ?? fail('NOT_FOUND', `no parameter named '${name}'`);
  }

  /** Zero the gradient buffer (start of an accumulation window). */
  zeroGrads(): void {
    this.backend.zero(this.grad);
  }

  /**
   * Start a backward pass. Without `overwrite` every gradient write adds to the buffer (zeroed, or
   * holding earlier micro-batches'). With it, the first write of each parameter's gradient
   * replaces what the buffer holds and later ones add: a step's first micro-batch then needs no
   * zeroing beforehand, and its weight-gradient GEMMs do not read the buffer back (β = 0), as
   * PyTorch's gradients set to None.
   */
  beginGradients(overwrite: boolean): void {
    this.written = overwrite ? new Set() : null;
  }

  /** Whether this write of the gradient of `params` (written by one op) adds to the buffer; else it replaces it. */
  accumulates(...params: Param[]): boolean {
    const written = this.written;
    if (!written) return true;
    const first = params.filter((p) => !written.has(p));
    if (first.length > 0 && first.length < params.length) {
      throw new Error(`ParamStore: one op writes the gradients of ${params.map((p) => p.name).join(', ')}, some of them for the first time in this pass and some not`);
    }
    for (const p of first) written.add(p);
    return first.length === 0;
  }

  /** End the pass begun by beginGradients: under overwrite, the gradients it did not write are zeroed (not left from the last step). */
  endGradients(): void {
    const written = this.written;
    this.written = null;
    if (written) for (const p of this.list) if (!written.has(p)) this.backend.zero(p.grad);
  }

  destroy(): void {
    if (this.flatValue) this.backend.free(this.flatValue);
    if (this.flatGrad) this.backend.free(this.flatGrad);
    if (this.flatCompute) this.backend.free(this.flatCompute);
  }
}
/** One parameter to initialise: `n` values at `offset` of the flat buffer, keyed by its index. */
export interface InitJob {
  readonly offset: number;
  readonly n: number;
  readonly init: ParamInit;
  readonly index: number;
}

/** Returns a flat host buffer of `size` values holding every job's initial values. */
export type ParamFiller = (size: number, jobs: readonly InitJob[], seed: number) => Float32Array;

export const fillSequential: ParamFiller = (size, jobs, seed) => {
  const host = new Float32Array(size);
  for (const j of jobs) fillInit(host, j, seed);
  return host;
};

/**
 * Initial values keyed by (seed, parameter index): the same on every backend and rank. Elements
 * [from, to) only, from a multiple of 4 (Box-Muller takes stream words two by two, four a block),
 * so a large parameter can be filled in pieces with the same values.
 */
export function fillInit(out: Float32Array, job: InitJob, seed: number, from = 0, to = job.n): void {
  const { offset, init } = job;
  if (init.kind === 'zeros') return;
  if (init.kind === 'ones') {
    out.fill(1, offset + from, offset + to);
    return;
  }
  const rng = new PhiloxStream(seed, RngPurpose.init, job.index);
  if (from > 0) rng.seekWord(from);
  for (let i = from; i < to; i++) out[offset + i] = rng.normal() * init.std;
}
