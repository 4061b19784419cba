/** RMSNorm layer: y = x / rms(x) · weight. */
import type { Backend } from '../backend/backend.js';
import { rmsnorm, rmsnormBackward } from '../ops/rmsnorm.js';
import type { Tensor } from '../tensor.js';
import type { Param, ParamStore } from './params.js';

export class RMSNorm {
  readonly weight: Param;

  constructor(store: ParamStore, name: string, readonly dim: number, readonly eps: number) {
    this.weight = store.declare(name, [dim], { kind: 'ones' }, false);
  }

  forward(b: Backend, x: Tensor, y: Tensor, rstd: Tensor, rows: number): void {
    b.run(rmsnorm, { x, weight: this.weight.compute, y, rstd }, { rows, dim: this.dim, eps: this.eps });
  }

  /** dx = dresidual + ∂y/∂x · dy; weight gradient accumulated (ParamStore.accumulates). `x` is the normalised input. */
  backward(b: Backend, dy: Tensor, x: Tensor, rstd: Tensor, dresidual: Tensor, dx: Tensor, rows: number): void {
    const attrs = { rows, dim: this.dim, eps: this.eps, accumulate: this.weight.store.accumulates(this.weight), outF32: true };
    b.run(rmsnormBackward, { dy, x, weight: this.weight.compute, rstd, dresidual, dx, dweight: this.weight.grad }, attrs);
  }
}
