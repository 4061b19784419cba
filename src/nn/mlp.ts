/**
 * SwiGLU MLP: down(silu(gate(x)) · up(x)). Saves the gate and up projections and, unless
 * `recompute` is set, their product; with it the product lives in the shared scratch and backward
 * recomputes it (the swiglu op on the stored gate and up: the same math as the forward's).
 *
 * Training keeps the hidden activations transposed, [hidden, rows]: the gate and up weights sit
 * back to back in the parameter store, so Wgu = [Wgate; Wup] is one [2·hidden, dModel] matrix,
 * and Gᵀ;Uᵀ = Wgu · xᵀ is one GEMM whose two halves are the gate and up activations, each
 * contiguous; one op (matmul_swiglu) computes it and the product, which Hopper fuses into the
 * GEMM's epilogue. Backward likewise takes dx = [dGᵀ; dUᵀ]ᵀ · Wgu and dWgu = [dGᵀ; dUᵀ] · x as one
 * GEMM each: three GEMMs of twice the size instead of six (the element-wise swiglu ops do not care
 * about the layout). Decoding (fewer rows than built) keeps the row-major layout.
 */
import type { Backend } from '../backend/backend.js';
import { matmul, matmulAdd, matmulAddAttrs, matmulAttrs } from '../ops/matmul.js';
import { matmulSwiglu, matmulSwigluBackward } from '../ops/matmul_swiglu.js';
import { swiglu, swigluBackward } from '../ops/swiglu.js';
import type { Tensor } from '../tensor.js';
import type { Arena } from './arena.js';
import { type Fp8Context, type Fp8Linear, matrix } from './fp8.js';
import { Linear, as3d } from './linear.js';
import { PARAM_ALIGN, type ParamStore } from './params.js';

/**
 * Whether the store lays a SwiGLU MLP's gate and up weights back to back, so one GEMM serves both
 * (`SwiGluMlp.joined`): declared in that order, they are unless the gate's hidden · dModel
 * elements need padding to PARAM_ALIGN.
 */
export function gateUpJoined(dModel: number, hidden: number): boolean {
  return (dModel * hidden) % PARAM_ALIGN === 0;
}

/** Temporaries shared by every MLP (only one runs at a time). */
export class MlpScratch {
  /**
   * dh [rows, hidden] (dhᵀ in the joined layout), for the MLPs whose gate and up are not joined
   * and for FP8 ones (the joined bf16 ones never store it).
   */
  readonly dHidden: Tensor | undefined;
  /** dGᵀ then dUᵀ: [2 · hidden · rows], one buffer so that the input gradient is one GEMM. */
  readonly dGateUp: Tensor;
  constructor(arena: Arena, rows: number, dModel: number, hidden: number, fp8 = false) {
    this.dHidden = gateUpJoined(dModel, hidden) && !fp8 ? undefined : arena.alloc([rows, hidden]);
    this.dGateUp = arena.alloc([2 * rows * hidden]);
  }
}

export class SwiGluMlp {
  readonly gate: Linear;
  readonly up: Linear;
  readonly down: Linear;
  /** Gᵀ then Uᵀ: [2 · hidden · rows]. */
  private readonly gu: Tensor;
  private readonly h: Tensor; // the product: its own buffer, or the first half of scratch.dGateUp when recomputed or (FP8) kept as Q(hᵀ)
  /** FP8 (useFp8) with gate and up joined: the joined projection's sites and the down projection's. */
  private fp8: { readonly ctx: Fp8Context; readonly gateUp: Fp8Linear; readonly down: Fp8Linear } | null = null;

  constructor(
    store: ParamStore, arena: Arena, name: string, readonly dModel: number, readonly hidden: number, readonly rows: number,
    private readonly scratch: MlpScratch, std: number, outStd: number, private readonly recompute = false, fp8KeepsInputs = false,
  ) {
    this.gate = new Linear(store, `${name}.w_gate`, dModel, hidden, std);
    this.up = new Linear(store, `${name}.w_up`, dModel, hidden, std);
    this.down = new Linear(store, `${name}.w_down`, hidden, dModel, outStd);
    this.gu = arena.alloc([2 * rows * hidden]);
    // dGateUp is free in the forward pass, and in the backward pass until matmul_swiglu_backward
    // (swiglu_backward, unjoined) writes it. An FP8 MLP that keeps Q(hᵀ) (useFp8) reads h in its forward only.
    if (fp8KeepsInputs && !gateUpJoined(dModel, hidden)) throw new Error('mlp: only the joined layout keeps its FP8 inputs');
    this.h = recompute || fp8KeepsInputs ? scratch.dGateUp : arena.alloc([rows * hidden]);
  }

  /**
   * Whether the store laid the gate and up weights out back to back, so one GEMM serves both (it
   * does, in declaration order, unless padding to PARAM_ALIGN separates them).
   */
  get joined(): boolean {
    return this.up.weight.offset === this.gate.weight.offset + this.hidden * this.dModel;
  }

  /**
   * Run the GEMMs in FP8 from now on: joined, the gate and up weights as one and the down
   * projection through the transposed layout, each keeping Q(xᵀ) of its input for its backward
   * where the MLP was built to (`fp8KeepsInputs`); else each Linear on its own.
   */
  useFp8(ctx: Fp8Context, keepInputs: boolean): void {
    if (!this.joined) {
      for (const l of [this.gate, this.up, this.down]) l.useFp8(ctx, this.rows);
      return;
    }
    if (!this.scratch.dHidden) throw new Error('mlp: FP8 needs the scratch built for FP8 (MlpScratch fp8)');
    this.fp8 = {
      ctx,
      gateUp: ctx.linear(this.gate.weight, 2 * this.hidden, this.dModel, this.rows, undefined, keepInputs),
      down: ctx.linear(this.down.weight, this.dModel, this.hidden, this.rows, undefined, keepInputs),
    };
  }

  /** The first r·c elements of t as one [r, c] matrix (a batch of one for matmul). */
  private static mat(b: Backend, t: Tensor, r: number, c: number): Tensor {
    return b.view(t, 0, [1, r, c]);
  }

  /** The two halves of a [2·r·c] buffer, each shaped [r, c]. */
  private static halves(b: Backend, t: Tensor, r: number, c: number): [Tensor, Tensor] {
    return [b.view(t, 0, [r, c]), b.view(t, r * c, [r, c])];
  }

  /** h = silu(G) · U over [r, c]: the row-major layout ([rows, hidden]) or the transposed one ([hidden, rows]). */
  private product(b: Backend, r: number, c: number): Tensor {
    const [g, u] = SwiGluMlp.halves(b, this.gu, r, c);
    const h = b.view(this.h, 0, [r, c]);
    b.run(swiglu, { gate: g, up: u, out: h }, { rows: r, hidden: c });
    return h;
  }

  /**
   * out [rows, dModel] = residual + mlp(x [rows, dModel]); fewer rows than built for use the first
   * rows of the buffers (decoding).
   */
  forward(b: Backend, x: Tensor, residual: Tensor, out: Tensor, rows = this.rows): void {
    const F = this.hidden, d = this.dModel;
    if (rows !== this.rows || !this.joined) {
      const [g, u] = SwiGluMlp.halves(b, this.gu, rows, F);
      this.gate.forward(b, x, g, rows);
      this.up.forward(b, x, u, rows);
      this.down.forward(b, this.product(b, rows, F), out, rows, residual);
      return;
    }
    if (this.fp8) {
      // [Gᵀ; Uᵀ] = Q(Wgu) · Q(x)ᵀ; hᵀ = silu(Gᵀ) · Uᵀ; out = residual + Q(h) · Q(Wdown)ᵀ
      const { ctx, gateUp, down } = this.fp8;
      ctx.forwardTransposed(gateUp, matrix(x, rows, d), b.view(this.gu, 0, [2 * F, rows]));
      ctx.forward(down, matrix(this.product(b, F, rows), rows, F, true), out, residual);
      return;
    }
    // [Gᵀ; Uᵀ] [2F, rows] = Wgu [2F, d] · xᵀ, and hᵀ = silu(Gᵀ) · Uᵀ, in one op (one kernel on Hopper)
    const hT = b.view(this.h, 0, [F, rows]);
    b.run(matmulSwiglu, { wgu: b.view(this.gate.weight.compute, 0, [2 * F, d]), x: b.view(x, 0, [rows, d]), gu: b.view(this.gu, 0, [2 * F, rows]), out: hT }, { hidden: F, rows, k: d });
    // out [rows, d] = residual + (hᵀ)ᵀ · Wdownᵀ
    b.run(matmulAdd, { a: as3d(b, hT), b: as3d(b, this.down.weight.compute), residual: as3d(b, residual), out: as3d(b, out) }, matmulAddAttrs(1, rows, d, F, true, true));
  }

  backward(b: Backend, x: Tensor, dout: Tensor, dx: Tensor): void {
    const sc = this.scratch;
    const F = this.hidden, d = this.dModel, R = this.rows, m = SwiGluMlp.mat;
    if (!this.joined) {
      const dHidden = sc.dHidden;
      if (!dHidden) throw new Error(`mlp: gate and up not joined at dModel ${d}, hidden ${F}, but the scratch was sized for joined ones`);
      const [g, u] = SwiGluMlp.halves(b, this.gu, R, F);
      const [dg, du] = SwiGluMlp.halves(b, sc.dGateUp, R, F);
      const h = this.recompute ? this.product(b, R, F) : b.view(this.h, 0, [R, F]);
      this.down.backward(b, h, dout, dHidden, 'write', R);
      b.run(swigluBackward, { dout: dHidden, gate: g, up: u, dgate: dg, dup: du }, { rows: R, hidden: F });
      this.gate.backward(b, x, dg, dx, 'write', R);
      this.up.backward(b, x, du, dx, 'add', R);
      return;
    }
    if (this.fp8) return this.backwardFp8(b, this.fp8, x, dout, dx);
    const hT = this.recompute ? this.product(b, F, R) : b.view(this.h, 0, [F, R]);
    const store = this.down.weight.store;
    // dWdown [d, F] (+)= doutᵀ · (hᵀ)ᵀ
    b.run(matmul, { a: as3d(b, dout), b: as3d(b, hT), out: as3d(b, this.down.weight.grad) }, matmulAttrs(1, d, F, R, true, true, { accumulate: store.accumulates(this.down.weight), outF32: true }));
    // dhᵀ [F, rows] = Wdownᵀ · doutᵀ, then [dGᵀ; dUᵀ] from it and [Gᵀ; Uᵀ], in one op (dh never stored on Hopper)
    const gradGateUp = { wdown: b.view(this.down.weight.compute, 0, [d, F]), dout: b.view(dout, 0, [R, d]), gu: b.view(this.gu, 0, [2 * F, R]), dgu: b.view(sc.dGateUp, 0, [2 * F, R]) };
    b.run(matmulSwigluBackward, gradGateUp, { hidden: F, rows: R, k: d });
    const dguT = m(b, sc.dGateUp, 2 * F, R);
    // dWgu [2F, d] (+)= [dGᵀ; dUᵀ] · x;  dx [rows, d] = [dGᵀ; dUᵀ]ᵀ · Wgu
    b.run(matmul, { a: dguT, b: as3d(b, x), out: m(b, this.gate.weight.grad, 2 * F, d) }, matmulAttrs(1, 2 * F, d, R, false, false, { accumulate: store.accumulates(this.gate.weight, this.up.weight), outF32: true }));
    b.run(matmul, { a: dguT, b: m(b, this.gate.weight.compute, 2 * F, d), out: as3d(b, dx) }, matmulAttrs(1, R, d, 2 * F, true, false));
  }

  /**
   * The joined layout's backward in FP8: dWdown from Q(doutᵀ) and Q(hᵀ) (kept from the forward,
   * or h kept or recomputed and quantised now), and dhᵀ = Q(Wdownᵀ) · Q(dout)ᵀ (into
   * scratch.dHidden); [dGᵀ; dUᵀ] by swiglu_backward; dWgu and dx from them.
   */
  private backwardFp8(b: Backend, f: NonNullable<SwiGluMlp['fp8']>, x: Tensor, dout: Tensor, dx: Tensor): void {
    const sc = this.scratch;
    const F = this.hidden, d = this.dModel, R = this.rows;
    const { ctx, gateUp, down } = f;
    const store = this.down.weight.store;
    const hT = down.saved ? null : matrix(this.recompute ? this.product(b, F, R) : b.view(this.h, 0, [F, R]), R, F, true);
    const dhT = b.view(sc.dHidden!, 0, [F, R]);
    ctx.backward(down, hT, matrix(dout, R, d), b.view(this.down.weight.grad, 0, [d, F]), store.accumulates(this.down.weight), matrix(dhT, R, F, true));
    const [g, u] = SwiGluMlp.halves(b, this.gu, F, R);
    const [dg, du] = SwiGluMlp.halves(b, sc.dGateUp, F, R);
    b.run(swigluBackward, { dout: dhT, gate: g, up: u, dgate: dg, dup: du }, { rows: F, hidden: R });
    const dgu = matrix(sc.dGateUp, R, 2 * F, true);
    ctx.backward(gateUp, gateUp.saved ? null : matrix(x, R, d), dgu, b.view(this.gate.weight.grad, 0, [2 * F, d]), store.accumulates(this.gate.weight, this.up.weight), matrix(dx, R, d));
  }
}
