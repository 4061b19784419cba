/**
 * Linear layer without bias: y = x · Wᵀ with W stored [out, in] as Hugging Face stores it. The
 * forward and input gradient use the weight's working copy (the compute dtype); the weight
 * gradient accumulates in f32 straight into the master gradient (matmul with accumulate, outF32).
 */
import type { Backend } from '../backend/backend.js';
import { matmul, matmulAdd, matmulAddAttrs, matmulAttrs } from '../ops/matmul.js';
import type { Tensor } from '../tensor.js';
import { type Fp8Context, type Fp8Linear, matrix } from './fp8.js';
import type { Param, ParamStore } from './params.js';

/** How a backward pass delivers an input gradient: overwrite, add to what is there, or skip. */
export type GradMode = 'write' | 'add' | 'none';

export class Linear {
  readonly weight: Param;
  /** Set by `useFp8`: the GEMMs read FP8 operands (src/nn/fp8.ts). */
  private fp8: { readonly ctx: Fp8Context; readonly sites: Fp8Linear } | null = null;

  constructor(store: ParamStore | null, name: string, readonly inFeatures: number, readonly outFeatures: number, std: number, shared?: Param) {
    this.weight = shared ?? store!.declare(name, [outFeatures, inFeatures], { kind: 'normal', std }, true);
  }

  /** A linear layer over an existing [out, in] parameter (tied embeddings). */
  static sharing(weight: Param, inFeatures: number, outFeatures: number): Linear {
    return new Linear(null, '', inFeatures, outFeatures, 0, weight);
  }

  /** Run this layer's GEMMs in FP8 from now on, over up to `tokens` rows. */
  useFp8(ctx: Fp8Context, tokens: number): void {
    this.fp8 = { ctx, sites: ctx.linear(this.weight, this.outFeatures, this.inFeatures, tokens) };
  }

  /** y [rows, out] = x [rows, in] · Wᵀ, or residual + x · Wᵀ (a residual add in the GEMM). */
  forward(b: Backend, x: Tensor, y: Tensor, rows: number, residual?: Tensor): void {
    if (this.fp8) return this.fp8.ctx.forward(this.fp8.sites, matrix(x, rows, this.inFeatures), y, residual);
    const [a, w, out] = [as3d(b, x), as3d(b, this.weight.compute), as3d(b, y)];
    if (residual) {
      b.run(matmulAdd, { a, b: w, residual: as3d(b, residual), out }, matmulAddAttrs(1, rows, this.outFeatures, this.inFeatures, false, true));
    } else {
      b.run(matmul, { a, b: w, out }, matmulAttrs(1, rows, this.outFeatures, this.inFeatures, false, true));
    }
  }

  /** dW += dyᵀ · x (f32; or = on the pass's first write: ParamStore.accumulates); dx = or += dy · W (per `mode`). */
  backward(b: Backend, x: Tensor, dy: Tensor, dx: Tensor | null, mode: GradMode, rows: number): void {
    const accumulate = this.weight.store.accumulates(this.weight);
    if (this.fp8) {
      const dxM = mode !== 'none' && dx ? matrix(dx, rows, this.inFeatures) : null;
      this.fp8.ctx.backward(this.fp8.sites, matrix(x, rows, this.inFeatures), matrix(dy, rows, this.outFeatures), this.weight.grad, accumulate, dxM, mode === 'add');
      return;
    }
    b.run(matmul, { a: as3d(b, dy), b: as3d(b, x), out: as3d(b, this.weight.grad) }, matmulAttrs(1, this.outFeatures, this.inFeatures, rows, true, false, { accumulate, outF32: true }));
    if (mode === 'none' || !dx) return;
    b.run(matmul, { a: as3d(b, dy), b: as3d(b, this.weight.compute), out: as3d(b, dx) }, matmulAttrs(1, rows, this.inFeatures, this.outFeatures, false, false, { accumulate: mode === 'add' }));
  }
}

/** A 2-D tensor seen as a batch of one matrix. */
export function as3d(b: Backend, t: Tensor): Tensor {
  return t.shape.length === 3 ? t : b.view(t, 0, [1, t.shape[0]!, t.shape.slice(1).reduce((x, y) => x * y, 1)]);
}

export function flat(b: Backend, t: Tensor): Tensor {
  return t.shape.length === 1 ? t : b.view(t, 0, [t.size]);
}

/** y [rows, n] += bias broadcast over rows: ones [rows, 1] · bias [1, n], accumulated into y. */
export function addRowBias(b: Backend, y: Tensor, bias: Param, ones: Tensor, rows: number): void {
  const n = bias.value.size;
  b.run(matmul, { a: b.view(ones, 0, [1, rows, 1]), b: b.view(bias.compute, 0, [1, 1, n]), out: as3d(b, y) }, matmulAttrs(1, rows, n, 1, false, false, { accumulate: true }));
}

/** bias.grad += Σ_rows dy (f32; or = on the pass's first write): onesᵀ [1, rows] · dy [rows, n]. */
export function accumulateBiasGrad(b: Backend, dy: Tensor, bias: Param, ones: Tensor, rows: number): void {
  const n = bias.value.size;
  const accumulate = bias.store.accumulates(bias);
  b.run(matmul, { a: b.view(ones, 0, [1, rows, 1]), b: as3d(b, dy), out: b.view(bias.grad, 0, [1, 1, n]) }, matmulAttrs(1, 1, n, rows, true, false, { accumulate, outF32: true }));
}
