/** Linear layer without bias: y = x · Wᵀ with W stored [out, in] as Hugging Face stores it. */
import type { Backend } from '../backend/backend.js';
import { axpy } from '../ops/axpy.js';
import { matmul } from '../ops/matmul.js';
import type { Tensor } from '../tensor.js';
import type { Param, ParamStore } from './params.js';
import type { Workspace } from './workspace.js';

/** How a backward pass delivers an input gradient: overwrite, add to what is there, or skip. */
export type GradMode = 'write' | 'add' | 'none';

export class Linear {
  readonly weight: Param;

  constructor(store: ParamStore | null, name: string, readonly inFeatures: number, readonly outFeatures: number, std: number, shared?: Param) {
    this.weight = shared ?? store!.declare(name, [outFeatures, inFeatures], { kind: 'normal', std }, true);
  }

  /** A linear layer over an existing [out, in] parameter (tied embeddings). */
  static sharing(weight: Param, inFeatures: number, outFeatures: number): Linear {
    return new Linear(null, '', inFeatures, outFeatures, 0, weight);
  }

  /** y [rows, out] = x [rows, in] · Wᵀ */
  forward(b: Backend, x: Tensor, y: Tensor, rows: number): void {
    b.run(matmul, { a: as3d(b, x), b: as3d(b, this.weight.value), out: as3d(b, y) }, { batch: 1, m: rows, n: this.outFeatures, k: this.inFeatures, transA: false, transB: true });
  }

  /** dW += dyᵀ · x; dx = dy · W (per `mode`). */
  backward(b: Backend, ws: Workspace, x: Tensor, dy: Tensor, dx: Tensor | null, mode: GradMode, rows: number): void {
    const dW = ws.weightScratch(b, this.weight.value.shape);
    b.run(matmul, { a: as3d(b, dy), b: as3d(b, x), out: as3d(b, dW) }, { batch: 1, m: this.outFeatures, n: this.inFeatures, k: rows, transA: true, transB: false });
    b.run(axpy, { x: flat(b, dW), y: flat(b, this.weight.grad) }, { n: this.weight.grad.size, alpha: 1 });
    if (mode === 'none' || !dx) return;
    const target = mode === 'add' ? ws.actScratch(b, dx.shape) : dx;
    b.run(matmul, { a: as3d(b, dy), b: as3d(b, this.weight.value), out: as3d(b, target) }, { batch: 1, m: rows, n: this.inFeatures, k: this.outFeatures, transA: false, transB: false });
    if (mode === 'add') b.run(axpy, { x: flat(b, target), y: flat(b, dx) }, { n: dx.size, alpha: 1 });
  }
}

/** A 2-D tensor seen as a batch of one matrix. */
export function as3d(b: Backend, t: Tensor): Tensor {
  return t.shape.length === 3 ? t : b.view(t, 0, [1, t.shape[0]!, t.shape.slice(1).reduce((x, y) => x * y, 1)]);
}

export function flat(b: Backend, t: Tensor): Tensor {
  return t.shape.length === 1 ? t : b.view(t, 0, [t.size]);
}

/** y [rows, n] += bias broadcast over rows: ones [rows, 1] · bias [1, n] into `scratch`, then added. */
export function addRowBias(b: Backend, y: Tensor, bias: Param, ones: Tensor, scratch: Tensor, rows: number): void {
  const n = bias.value.size;
  const tmp = b.view(scratch, 0, [1, rows, n]);
  b.run(matmul, { a: b.view(ones, 0, [1, rows, 1]), b: b.view(bias.value, 0, [1, 1, n]), out: tmp }, { batch: 1, m: rows, n, k: 1, transA: false, transB: false });
  b.run(axpy, { x: flat(b, tmp), y: flat(b, y) }, { n: rows * n, alpha: 1 });
}

/** bias.grad += Σ_rows dy: onesᵀ [1, rows] · dy [rows, n]. */
export function accumulateBiasGrad(b: Backend, ws: Workspace, dy: Tensor, bias: Param, ones: Tensor, rows: number): void {
  const n = bias.value.size;
  const dbias = ws.weightScratch(b, [1, 1, n]);
  b.run(matmul, { a: b.view(ones, 0, [1, rows, 1]), b: as3d(b, dy), out: dbias }, { batch: 1, m: 1, n, k: rows, transA: true, transB: false });
  b.run(axpy, { x: flat(b, dbias), y: bias.grad }, { n, alpha: 1 });
}
