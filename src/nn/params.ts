/**
 * Parameters, their gradients and optimizer state live in flat device buffers; layers hold views.
 * Master values and gradients are f32. Under a narrower compute dtype (bf16) a working copy of the
 * values in that dtype, same layout, is what the layers read; `refreshCompute` re-derives it with
 * one cast after the masters are set (init, load), and the optimizer step writes it as it updates
 * them (adamw_cast).
 * Views start on 64-element (256-byte) boundaries, as WebGPU storage bindings require. Decayed
 * parameters come first and the rest (norms) after, so AdamW runs on two ranges without a mask
 * and the global gradient norm is one reduction over the whole gradient buffer.
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
  readonly value: Tensor;
  readonly grad: Tensor;
}

export class ParamStore {
  private readonly specs: ParamSpec[] = [];
  private params: Param[] | null = null;
  private flatValue: Tensor | null = null;
  private flatGrad: Tensor | null = null;
  private flatCompute: Tensor | null = null;
  private ranges: { decay: ParamRange; noDecay: ParamRange } | null = null;
  /** What runs after the working copy is written (onWorkingCopy). */
  private readonly copyListeners: ((updated: boolean) => void)[] = [];
  /** The parameters whose gradient the current overwriting pass has written (beginGradients). */
  private written: Set<Param> | null = null;

  constructor(readonly backend: Backend, readonly computeDtype: FloatDType = 'f32') {}

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
    const value = b.alloc([size], 'f32');
    const grad = b.alloc([size], 'f32');
    this.flatValue = value;
    this.flatGrad = grad;
    const work = this.computeDtype === 'f32' ? value : b.alloc([size], this.computeDtype);
    if (work !== value) this.flatCompute = work;
    const range = (offset: number, n: number): ParamRange => ({
      offset, size: n, value: b.view(value, offset, [n]), grad: b.view(grad, offset, [n]),
    });
    this.ranges = { decay: range(0, Math.max(decayEnd, 0)), noDecay: range(decayEnd, size - decayEnd) };
    const jobs: InitJob[] = [];
    this.params = this.specs.map((spec, index) => {
      const offset = offsets.get(spec)!;
      const p = spec as Param;
      Object.assign(p, { offset, store: this, value: b.view(value, offset, spec.shape), grad: b.view(grad, offset, spec.shape), compute: b.view(work, offset, spec.shape) });
      jobs.push({ offset, n: numel(spec.shape), init: spec.init, index });
      return p;
    });
    if (fill) this.upload(fill(size, jobs, seed));
    this.zeroGrads();
  }

  /** Set every master value from a host array in the flat layout (and the working copy from it). */
  upload(host: Float32Array): void {
    this.backend.upload(this.value, host);
    this.refreshCompute();
  }

  /** Re-derive the working copy from the masters (a no-op under f32, where they are one buffer). */
  refreshCompute(): void {
    const work = this.flatCompute;
    if (work) this.backend.run(cast, { x: this.value, out: work }, { n: work.size, from: 'f32', to: this.computeDtype });
    this.workingCopyWritten(false);
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

  get value(): Tensor {
    if (!this.flatValue) throw new Error('ParamStore: not materialized');
    return this.flatValue;
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
