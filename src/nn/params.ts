/**
 * Parameters, their gradients and optimizer state live in flat device buffers; layers hold views.
 * Views start on 64-element (256-byte) boundaries, as WebGPU storage bindings require. Decayed
 * parameters come first and the rest (norms) after, so AdamW runs on two ranges without a mask
 * and the global gradient norm is one reduction over the whole gradient buffer.
 */
import type { Backend } from '../backend/backend.js';
import { fail } from '../errors.js';
import { PhiloxStream, RngPurpose } from '../rng/philox.js';
import { type Shape, type Tensor, numel } from '../tensor.js';

const ALIGN = 64;

export type ParamInit = { readonly kind: 'normal'; readonly std: number } | { readonly kind: 'ones' } | { readonly kind: 'zeros' };

export interface ParamSpec {
  readonly name: string;
  readonly shape: Shape;
  readonly init: ParamInit;
  readonly decay: boolean;
}

export interface Param extends ParamSpec {
  readonly offset: number; // elements into the flat buffers
  value: Tensor;
  grad: Tensor;
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
  private ranges: { decay: ParamRange; noDecay: ParamRange } | null = null;
  private zeros: Float32Array | null = null;

  constructor(readonly backend: Backend) {}

  /** Declare a parameter; its tensors exist after `materialize`. */
  declare(name: string, shape: Shape, init: ParamInit, decay: boolean): Param {
    if (this.params) throw new Error(`ParamStore: '${name}' declared after materialize()`);
    if (this.specs.some((s) => s.name === name)) throw new Error(`ParamStore: duplicate parameter '${name}'`);
    const spec = { name, shape, init, decay };
    this.specs.push(spec);
    // Filled in by materialize(); layers keep the object and read .value/.grad later.
    return spec as unknown as Param;
  }

  /** Allocate the flat buffers, give every parameter its views, and initialise from `seed`. */
  materialize(seed: number): void {
    if (this.params) throw new Error('ParamStore: materialize() called twice');
    const ordered = [...this.specs.filter((s) => s.decay), ...this.specs.filter((s) => !s.decay)];
    let size = 0;
    let decayEnd = 0;
    const offsets = new Map<ParamSpec, number>();
    for (const s of ordered) {
      offsets.set(s, size);
      size += Math.ceil(numel(s.shape) / ALIGN) * ALIGN;
      if (s.decay) decayEnd = size;
    }
    size = Math.max(size, ALIGN);
    const b = this.backend;
    const value = b.alloc([size], 'f32');
    const grad = b.alloc([size], 'f32');
    this.flatValue = value;
    this.flatGrad = grad;
    const range = (offset: number, n: number): ParamRange => ({
      offset, size: n, value: b.view(value, offset, [n]), grad: b.view(grad, offset, [n]),
    });
    this.ranges = { decay: range(0, Math.max(decayEnd, 0)), noDecay: range(decayEnd, size - decayEnd) };
    const host = new Float32Array(size);
    this.params = this.specs.map((spec, index) => {
      const offset = offsets.get(spec)!;
      const p = spec as Param;
      Object.assign(p, { offset, value: b.view(value, offset, spec.shape), grad: b.view(grad, offset, spec.shape) });
      fillInit(host, offset, numel(spec.shape), spec.init, seed, index);
      return p;
    });
    b.upload(value, host);
    this.zeroGrads();
  }

  get list(): readonly Param[] {
    if (!this.params) throw new Error('ParamStore: not materialized');
    return this.params;
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
    this.zeros ??= new Float32Array(this.grad.size);
    this.backend.upload(this.grad, this.zeros);
  }

  destroy(): void {
    if (this.flatValue) this.backend.free(this.flatValue);
    if (this.flatGrad) this.backend.free(this.flatGrad);
  }
}
/** Initial values keyed by (seed, parameter index): the same on every backend and rank. */
function fillInit(out: Float32Array, offset: number, n: number, init: ParamInit, seed: number, index: number): void {
  if (init.kind === 'zeros') return;
  if (init.kind === 'ones') {
    out.fill(1, offset, offset + n);
    return;
  }
  const rng = new PhiloxStream(seed, RngPurpose.init, index);
  for (let i = 0; i < n; i++) out[offset + i] = rng.normal() * init.std;
}
