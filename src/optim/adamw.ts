/**
 * AdamW over the flat parameter buffers: one global gradient norm (with the clip coefficient
 * computed on the device, so clipping needs no host round-trip), then the fused update on the
 * decayed range and on the rest with weight decay 0. Under mixed precision the update also writes
 * the working copy (adamw_cast), so it needs no cast pass of its own.
 */
import type { Backend } from '../backend/backend.js';
import type { ParamRange, ParamStore } from '../nn/params.js';
import { adamw, adamwCast } from '../ops/adamw.js';
import { gradNorm } from '../ops/grad_norm.js';
import type { Tensor } from '../tensor.js';

export interface AdamWOptions {
  readonly beta1: number;
  readonly beta2: number;
  readonly eps: number;
  readonly weightDecay: number;
  /** Clip the global gradient norm to this; 0 disables clipping. */
  readonly gradClip: number;
}

export class AdamW {
  readonly m: Tensor;
  readonly v: Tensor;
  /** [norm, clip scale] of the last step's gradient. */
  readonly normOut: Tensor;
  private readonly backend: Backend;

  constructor(readonly store: ParamStore, readonly opts: AdamWOptions) {
    const b = store.backend;
    this.backend = b;
    const n = store.value.size;
    this.m = b.alloc([n], 'f32');
    this.v = b.alloc([n], 'f32');
    b.zero(this.m);
    b.zero(this.v);
    this.normOut = b.alloc([2], 'f32');
  }

  /** Compute the gradient norm of the accumulated gradients (before `update`). */
  measure(): void {
    const b = this.backend;
    b.run(gradNorm, { x: this.store.grad, out: this.normOut }, { n: this.store.grad.size, maxNorm: this.opts.gradClip });
  }

  /** Apply one update with learning rate `lr` at 1-based `step` (bias correction). */
  update(lr: number, step: number): void {
    this.updateRange(this.store.decayRange, lr, step, this.opts.weightDecay);
    this.updateRange(this.store.noDecayRange, lr, step, 0);
  }

  private updateRange(r: ParamRange, lr: number, step: number, weightDecay: number): void {
    if (r.size === 0) return;
    const b = this.backend;
    const { beta1, beta2, eps } = this.opts;
    const args = { param: r.value, grad: r.grad, m: b.view(this.m, r.offset, [r.size]), v: b.view(this.v, r.offset, [r.size]), clip: this.normOut };
    const attrs = { n: r.size, lr, beta1, beta2, eps, weightDecay, step };
    const work = this.store.workingCopy;
    if (work) b.run(adamwCast, { ...args, work: b.view(work, r.offset, [r.size]) }, attrs);
    else b.run(adamw, args, attrs);
  }

  destroy(): void {
    this.backend.free(this.m);
    this.backend.free(this.v);
    this.backend.free(this.normOut);
  }
}
