/**
 * Parameters, their gradients and optimizer state live in flat device buffers; layers hold views.
 * Views start on 64-element (256-byte) boundaries, as WebGPU storage bindings require. Two groups
 * keep weight decay off norms (and anything else registered with decay: false) without a mask.
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
  readonly group: 0 | 1; // 0: weight decay, 1: none
  readonly offset: number; // elements into its group's flat buffer
  value: Tensor;
  grad: Tensor;
}

export interface ParamGroup {
  readonly size: number;
  readonly value: Tensor;
  readonly grad: Tensor;
}

export class ParamStore {
  private readonly specs: ParamSpec[] = [];
  private params: Param[] | null = null;
  private groupTensors: [ParamGroup, ParamGroup] | null = null;
  private zeros: Float32Array[] = [];

  constructor(readonly backend: Backend) {}

  /** Declare a parameter; returns a handle whose tensors exist after `materialize`. */
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
    const sizes: [number, number] = [0, 0];
    const layout = this.specs.map((s) => {
      const group = s.decay ? 0 : 1;
      const offset = sizes[group];
      sizes[group] += Math.ceil(numel(s.shape) / ALIGN) * ALIGN;
      return { spec: s, group: group as 0 | 1, offset };
    });
    const groups = sizes.map((n) => {
      const size = Math.max(n, ALIGN);
      return { size, value: this.backend.alloc([size], 'f32'), grad: this.backend.alloc([size], 'f32') };
    }) as [ParamGroup, ParamGroup];
    this.groupTensors = groups;
    const host = groups.map((g) => new Float32Array(g.size));
    this.params = layout.map(({ spec, group, offset }, index) => {
      const p = spec as Param;
      Object.assign(p, {
        group,
        offset,
        value: this.backend.view(groups[group].value, offset, spec.shape),
        grad: this.backend.view(groups[group].grad, offset, spec.shape),
      });
      fillInit(host[group]!, offset, numel(spec.shape), spec.init, seed, index);
      return p;
    });
    groups.forEach((g, i) => {
      this.backend.upload(g.value, host[i]!);
      this.backend.upload(g.grad, new Float32Array(g.size));
    });
  }

  get list(): readonly Param[] {
    if (!this.params) throw new Error('ParamStore: not materialized');
    return this.params;
  }

  get groups(): readonly [ParamGroup, ParamGroup] {
    if (!this.groupTensors) throw new Error('ParamStore: not materialized');
    return this.groupTensors;
  }

  get count(): number {
    return this.specs.reduce((n, s) => n + numel(s.shape), 0);
  }

  find(name: string): Param {
    return this.list.find((p) => p.name === name) ?? fail('NOT_FOUND', `no parameter named '${name}'`);
  }

  /** Zero both gradient buffers (start of an accumulation window). */
  zeroGrads(): void {
    this.groups.forEach((g, i) => {
      this.zeros[i] ??= new Float32Array(g.size);
      this.backend.upload(g.grad, this.zeros[i]!);
    });
  }

  destroy(): void {
    for (const g of this.groupTensors ?? []) {
      this.backend.free(g.value);
      this.backend.free(g.grad);
    }
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
