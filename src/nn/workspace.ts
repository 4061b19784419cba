/**
 * Scratch shared by every layer's backward pass, allocated once: a weight-gradient buffer in the
 * compute dtype for the op that writes a parameter gradient in the activations' dtype (RMSNorm's
 * dweight, at most dModel values), and under a narrower compute dtype an f32 buffer of the same
 * size to widen it before it is added to the f32 master gradient. Matmul and embedding weight
 * gradients need neither: they accumulate into the master gradient directly.
 */
import type { Backend } from '../backend/backend.js';
import { axpy } from '../ops/axpy.js';
import { cast } from '../ops/cast.js';
import { type FloatDType, type Shape, type Tensor, numel } from '../tensor.js';
import type { Arena } from './arena.js';
import type { Param } from './params.js';

export class Workspace {
  private readonly weight: Tensor;
  private readonly widened: Tensor | null;

  constructor(arena: Arena, maxWeight: number) {
    this.weight = arena.alloc([maxWeight]);
    this.widened = arena.floatDtype === 'f32' ? null : arena.alloc([maxWeight], 'f32');
  }

  weightScratch(b: Backend, shape: Shape): Tensor {
    if (numel(shape) > this.weight.size) throw new Error(`Workspace: weight scratch ${numel(shape)} > ${this.weight.size}`);
    return b.view(this.weight, 0, shape);
  }

  /** p.grad += g, with g (from weightScratch) in the compute dtype. */
  accumulateGrad(b: Backend, g: Tensor, p: Param): void {
    const n = p.grad.size;
    let src = b.view(g, 0, [n]);
    if (this.widened) {
      const wide = b.view(this.widened, 0, [n]);
      b.run(cast, { x: src, out: wide }, { n, from: g.dtype as FloatDType, to: 'f32' });
      src = wide;
    }
    b.run(axpy, { x: src, y: b.view(p.grad, 0, [n]) }, { n, alpha: 1 });
  }
}
