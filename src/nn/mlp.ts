/**
 * SwiGLU MLP: down(silu(gate(x)) · up(x)). Saves the gate and up projections and, unless
 * `recompute` is set, their product; with it the product lives in the shared scratch and backward
 * recomputes it (the same kernel on the same inputs: the same bits).
 *
 * Training keeps the hidden activations transposed, [hidden, rows]: the gate and up weights sit
 * back to back in the parameter store, so Wgu = [Wgate; Wup] is one [2·hidden, dModel] matrix,
 * and Gᵀ;Uᵀ = Wgu · xᵀ is one GEMM whose two halves are the gate and up activations, each
 * contiguous. Backward likewise takes dx = [dGᵀ; dUᵀ]ᵀ · Wgu and dWgu = [dGᵀ; dUᵀ] · x as one GEMM
 * each: three GEMMs of twice the size instead of six (the element-wise swiglu ops do not care
 * about the layout). Decoding (fewer rows than built) keeps the row-major layout.
 */
import type { Backend } from '../backend/backend.js';
import { matmul, matmulAttrs } from '../ops/matmul.js';
import { swiglu, swigluBackward } from '../ops/swiglu.js';
import type { Tensor } from '../tensor.js';
import type { Arena } from './arena.js';
import { Linear, as3d } from './linear.js';
import type { ParamStore } from './params.js';

/** Temporaries shared by every MLP (only one runs at a time). */
export class MlpScratch {
  readonly dHidden: Tensor;
  /** dGᵀ then dUᵀ: [2 · hidden · rows], one buffer so that the input gradient is one GEMM. */
  readonly dGateUp: Tensor;
  constructor(arena: Arena, rows: number, hidden: number) {
    this.dHidden = arena.alloc([rows, hidden]);
    this.dGateUp = arena.alloc([2 * rows * hidden]);
  }
}

export class SwiGluMlp {
  readonly gate: Linear;
  readonly up: Linear;
  readonly down: Linear;
  /** Gᵀ then Uᵀ: [2 · hidden · rows]. */
  private readonly gu: Tensor;
  private readonly h: Tensor; // the product: its own buffer, or the first half of scratch.dGateUp when recomputed

  constructor(
    store: ParamStore, arena: Arena, name: string, readonly dModel: number, readonly hidden: number, readonly rows: number,
    private readonly scratch: MlpScratch, std: number, outStd: number, private readonly recompute = false,
  ) {
    this.gate = new Linear(store, `${name}.w_gate`, dModel, hidden, std);
    this.up = new Linear(store, `${name}.w_up`, dModel, hidden, std);
    this.down = new Linear(store, `${name}.w_down`, hidden, dModel, outStd);
    this.gu = arena.alloc([2 * rows * hidden]);
    // dGateUp is free in the forward pass, and in the backward pass until swiglu_backward writes it.
    this.h = recompute ? scratch.dGateUp : arena.alloc([rows * hidden]);
  }

  /**
   * Whether the store laid the gate and up weights out back to back, so one GEMM serves both (it
   * does, in declaration order, unless padding to PARAM_ALIGN separates them).
   */
  get joined(): boolean {
    return this.up.weight.offset === this.gate.weight.offset + this.hidden * this.dModel;
  }

  /** The first `count` elements after `offset` of t, shaped [1, r, c]. */
  private static part(b: Backend, t: Tensor, offset: number, r: number, c: number): Tensor {
    return b.view(t, offset, [1, r, c]);
  }

  /** out [rows, dModel] from x [rows, dModel]; fewer rows than built for use the first rows of the buffers (decoding). */
  forward(b: Backend, x: Tensor, out: Tensor, rows = this.rows): void {
    const F = this.hidden;
    const n = rows * F;
    if (rows !== this.rows || !this.joined) {
      const [g, u, h] = [b.view(this.gu, 0, [rows, F]), b.view(this.gu, n, [rows, F]), b.view(this.h, 0, [rows, F])];
      this.gate.forward(b, x, g, rows);
      this.up.forward(b, x, u, rows);
      b.run(swiglu, { gate: g, up: u, out: h }, { rows, hidden: F });
      this.down.forward(b, h, out, rows);
      return;
    }
    const p = SwiGluMlp.part;
    // [Gᵀ; Uᵀ] [2F, rows] = Wgu [2F, d] · xᵀ
    b.run(matmul, { a: p(b, this.gate.weight.compute, 0, 2 * F, this.dModel), b: as3d(b, x), out: p(b, this.gu, 0, 2 * F, rows) }, matmulAttrs(1, 2 * F, rows, this.dModel, false, true));
    this.product(b);
    // out [rows, d] = (hᵀ)ᵀ · Wdownᵀ
    b.run(matmul, { a: p(b, this.h, 0, F, rows), b: as3d(b, this.down.weight.compute), out: as3d(b, out) }, matmulAttrs(1, rows, this.dModel, F, true, true));
  }

  /** hᵀ = silu(Gᵀ) · Uᵀ, element-wise over [hidden, rows]. */
  private product(b: Backend): void {
    const F = this.hidden, n = this.rows * F;
    b.run(swiglu, { gate: b.view(this.gu, 0, [F, this.rows]), up: b.view(this.gu, n, [F, this.rows]), out: b.view(this.h, 0, [F, this.rows]) }, { rows: F, hidden: this.rows });
  }

  backward(b: Backend, x: Tensor, dout: Tensor, dx: Tensor): void {
    const sc = this.scratch;
    const F = this.hidden, d = this.dModel, R = this.rows, n = R * F;
    if (!this.joined) {
      const [g, u, h] = [b.view(this.gu, 0, [R, F]), b.view(this.gu, n, [R, F]), b.view(this.h, 0, [R, F])];
      const [dg, du] = [b.view(sc.dGateUp, 0, [R, F]), b.view(sc.dGateUp, n, [R, F])];
      if (this.recompute) b.run(swiglu, { gate: g, up: u, out: h }, { rows: R, hidden: F });
      this.down.backward(b, h, dout, sc.dHidden, 'write', R);
      b.run(swigluBackward, { dout: sc.dHidden, gate: g, up: u, dgate: dg, dup: du }, { rows: R, hidden: F });
      this.gate.backward(b, x, dg, dx, 'write', R);
      this.up.backward(b, x, du, dx, 'add', R);
      return;
    }
    const p = SwiGluMlp.part;
    if (this.recompute) this.product(b);
    const hT = p(b, this.h, 0, F, R);
    const dhT = p(b, sc.dHidden, 0, F, R);
    // dWdown [d, F] += doutᵀ · (hᵀ)ᵀ;  dhᵀ [F, rows] = Wdownᵀ · doutᵀ
    b.run(matmul, { a: as3d(b, dout), b: hT, out: as3d(b, this.down.weight.grad) }, matmulAttrs(1, d, F, R, true, true, { accumulate: true, outF32: true }));
    b.run(matmul, { a: as3d(b, this.down.weight.compute), b: as3d(b, dout), out: dhT }, matmulAttrs(1, F, R, d, true, true));
    b.run(swigluBackward, {
      dout: b.view(sc.dHidden, 0, [F, R]), gate: b.view(this.gu, 0, [F, R]), up: b.view(this.gu, n, [F, R]),
      dgate: b.view(sc.dGateUp, 0, [F, R]), dup: b.view(sc.dGateUp, n, [F, R]),
    }, { rows: F, hidden: R });
    const dguT = p(b, sc.dGateUp, 0, 2 * F, R);
    // dWgu [2F, d] += [dGᵀ; dUᵀ] · x;  dx [rows, d] = [dGᵀ; dUᵀ]ᵀ · Wgu
    b.run(matmul, { a: dguT, b: as3d(b, x), out: p(b, this.gate.weight.grad, 0, 2 * F, d) }, matmulAttrs(1, 2 * F, d, R, false, false, { accumulate: true, outF32: true }));
    b.run(matmul, { a: dguT, b: p(b, this.gate.weight.compute, 0, 2 * F, d), out: as3d(b, dx) }, matmulAttrs(1, R, d, 2 * F, true, false));
  }
}
