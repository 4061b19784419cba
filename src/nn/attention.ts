/**
 * Self-attention: q/k/v projections (with biases, Qwen2 style, when asked), per-head RMSNorm of q
 * and k (Qwen3 style, when asked), RoPE on q and k, flash attention (causal, bidirectional or
 * document-masked, grouped-query), output projection. Saves q, k, v, the output and the LSE, and
 * the un-normalised q and k with their rstd when q/k are normalised.
 *
 * Without biases and norms the three weights sit back to back in the parameter store, so
 * Wqkv = [Wq; Wk; Wv] is one [(H + 2G)·D, dModel] matrix. The forward projects q and k in one op,
 * matmul_rope: rope(x · [Wq; Wk]ᵀ) into the contiguous q and k attention takes (the GEMM, then
 * rope reading its rows a part at a time; on Hopper one kernel with rope in the GEMM's
 * epilogue), and v in a GEMM straight into its saved buffer (one GEMM for all three would leave v
 * to copy out of the projection). Backward writes the three gradients into one such matrix:
 * attention's backward puts dq, dk and dv straight into their parts (gradStride), dq and dk
 * turned back through rope (ropeBase: no rope backward of their own), so dWqkv
 * and dx are one GEMM each: three GEMMs of three times the size instead of nine, as the small
 * [tokens, d] × [d, d] GEMMs run far below the larger ones' rate.
 */
import type { Backend } from '../backend/backend.js';
import { type AttentionAttrs, attention, attentionBackward } from '../ops/attention.js';
import { stridedRows } from '../ops/op.js';
import { attentionDecode } from '../ops/attention_decode.js';
import { rope } from '../ops/rope.js';
import type { Tensor } from '../tensor.js';
import type { Arena } from './arena.js';
import { matmul, matmulAttrs } from '../ops/matmul.js';
import { matmulRope } from '../ops/matmul_rope.js';
import { type Fp8Context, type Fp8Linear, matrix } from './fp8.js';
import { Linear, addRowBias, accumulateBiasGrad, as3d } from './linear.js';
import { PARAM_ALIGN, type Param, type ParamStore } from './params.js';
import { RMSNorm } from './rmsnorm.js';

/**
 * One layer's key and value cache for one sequence: [1, maxLen, stride] each, a position's
 * kvHeads · headDim values first (the stride keeps every position 256-byte aligned for WebGPU).
 */
export interface KvCache {
  readonly k: Tensor;
  readonly v: Tensor;
  readonly stride: number;
}

export interface AttentionShape {
  readonly batch: number;
  readonly seqLen: number;
  readonly heads: number;
  readonly kvHeads: number;
  readonly headDim: number;
  readonly ropeBase: number;
  /** Biases on the q/k/v projections. */
  readonly qkvBias: boolean;
  /** RMSNorm over each head of q and k before RoPE, with this epsilon. */
  readonly qkNorm: boolean;
  readonly normEps: number;
  /** The backward gives the same bits on every run (train.deterministic: attention_backward's attribute). */
  readonly deterministic?: boolean;
}

/** Temporaries shared by every attention layer (only one layer runs at a time). */
export class AttentionScratch {
  /** [rows, (H + 2G)·D]: the fused projection's gradient (backward). */
  readonly qkv: Tensor;
  /**
   * Unfused, qkv as three dense [B, T, heads, D] parts one after another: q and k before rope in
   * the forward; dq, dk (rope's inputs') and dv in the backward.
   */
  readonly qPre: Tensor;
  readonly kPre: Tensor;
  readonly vPre: Tensor;
  readonly dAttn: Tensor;
  /** The q or k norm's input gradient, one at a time (qkNorm). */
  readonly normGrad: Tensor | null;
  /** 1 per row: broadcasts a bias over rows, and sums rows into its gradient (qkvBias). */
  readonly ones: Tensor | null;
  /** The zero residual gradient of the q/k norms (qkNorm). */
  readonly zeros: Tensor | null;

  constructor(arena: Arena, s: AttentionShape) {
    const q = [s.batch, s.seqLen, s.heads, s.headDim];
    const kv = [s.batch, s.seqLen, s.kvHeads, s.headDim];
    const rows = s.batch * s.seqLen;
    this.qkv = arena.alloc([rows * (s.heads + 2 * s.kvHeads) * s.headDim]);
    this.qPre = arena.backend.view(this.qkv, 0, q);
    this.kPre = arena.backend.view(this.qkv, rows * s.heads * s.headDim, kv);
    this.vPre = arena.backend.view(this.qkv, rows * (s.heads + s.kvHeads) * s.headDim, kv);
    this.dAttn = arena.alloc(q);
    this.normGrad = s.qkNorm ? arena.alloc(q) : null;
    this.ones = s.qkvBias ? arena.alloc([rows]) : null;
    if (this.ones) arena.backend.upload(this.ones, new Float32Array(rows).fill(1));
    this.zeros = s.qkNorm ? arena.alloc([rows * s.heads * s.headDim]) : null;
    if (this.zeros) arena.backend.zero(this.zeros);
  }
}

/** The optional pieces of one projection: its bias, and the per-head norm with what it saves. */
interface Projection {
  readonly linear: Linear;
  readonly heads: number;
  readonly bias: Param | null;
  readonly norm: RMSNorm | null;
  /** The projection before its norm, and the norm's rstd per (row, head). */
  readonly raw: Tensor | null;
  readonly rstd: Tensor | null;
}

export class SelfAttention {
  readonly q: Linear;
  readonly k: Linear;
  readonly v: Linear;
  readonly o: Linear;
  private readonly savedQ: Tensor;
  private readonly savedK: Tensor;
  private readonly savedV: Tensor;
  private readonly savedOut: Tensor;
  private readonly savedLse: Tensor;
  private readonly proj: { readonly q: Projection; readonly k: Projection; readonly v: Projection };
  /** FP8 (useFp8) with the fused layout: the joined q/k/v projection's sites. */
  private fp8: { readonly ctx: Fp8Context; readonly qkv: Fp8Linear } | null = null;

  constructor(store: ParamStore, arena: Arena, name: string, dModel: number, readonly s: AttentionShape, private readonly scratch: AttentionScratch, std: number, outStd: number) {
    // Declaration order is the checkpoint mapping's (src/checkpoint/hf.ts paramSpecs).
    this.q = new Linear(store, `${name}.wq`, dModel, s.heads * s.headDim, std);
    this.k = new Linear(store, `${name}.wk`, dModel, s.kvHeads * s.headDim, std);
    this.v = new Linear(store, `${name}.wv`, dModel, s.kvHeads * s.headDim, std);
    const bias = (which: string, n: number) => (s.qkvBias ? store.declare(`${name}.b${which}`, [n], { kind: 'zeros' }, false) : null);
    const biases = { q: bias('q', s.heads * s.headDim), k: bias('k', s.kvHeads * s.headDim), v: bias('v', s.kvHeads * s.headDim) };
    const norm = (which: string) => (s.qkNorm ? new RMSNorm(store, `${name}.${which}_norm`, s.headDim, s.normEps) : null);
    const norms = { q: norm('q'), k: norm('k') };
    this.o = new Linear(store, `${name}.wo`, s.heads * s.headDim, dModel, outStd);
    const rows = s.batch * s.seqLen;
    const projection = (linear: Linear, heads: number, b: Param | null, n: RMSNorm | null): Projection => ({
      linear, heads, bias: b, norm: n,
      raw: n ? arena.alloc([s.batch, s.seqLen, heads, s.headDim]) : null,
      rstd: n ? arena.alloc([rows * heads], 'f32') : null,
    });
    this.proj = {
      q: projection(this.q, s.heads, biases.q, norms.q),
      k: projection(this.k, s.kvHeads, biases.k, norms.k),
      v: projection(this.v, s.kvHeads, biases.v, null),
    };
    this.savedQ = arena.alloc([s.batch, s.seqLen, s.heads, s.headDim]);
    this.savedK = arena.alloc([s.batch, s.seqLen, s.kvHeads, s.headDim]);
    this.savedV = arena.alloc([s.batch, s.seqLen, s.kvHeads, s.headDim]);
    this.savedOut = arena.alloc([s.batch, s.seqLen, s.heads, s.headDim]);
    this.savedLse = arena.alloc([s.batch, s.heads, s.seqLen], 'f32');
  }

  private attrs(causal: boolean): AttentionAttrs {
    const s = this.s;
    return { batch: s.batch, seqLen: s.seqLen, heads: s.heads, kvHeads: s.kvHeads, headDim: s.headDim, causal, scale: 1 / Math.sqrt(s.headDim) };
  }

  private ropeAttrs(heads: number) {
    const s = this.s;
    return { batch: s.batch, seqLen: s.seqLen, heads, headDim: s.headDim, base: s.ropeBase };
  }

  /**
   * Whether q, k and v take one GEMM: no biases or norms, the weights back to back in the store,
   * and each part of a projection row starting at a multiple of PARAM_ALIGN elements (WebGPU
   * binds views at 256-byte offsets).
   */
  get fused(): boolean {
    const s = this.s;
    const q = s.heads * s.headDim, kv = s.kvHeads * s.headDim, d = this.q.inFeatures;
    return SelfAttention.fuses(s) && this.k.weight.offset === this.q.weight.offset + q * d && this.v.weight.offset === this.k.weight.offset + kv * d;
  }

  /**
   * Whether an attention layer of this shape is `fused`: the store lays the weights of q, k and v
   * back to back (declared in that order, with no padding when each part is a multiple of PARAM_ALIGN).
   */
  static fuses(s: AttentionShape): boolean {
    return !s.qkvBias && !s.qkNorm && (s.heads * s.headDim) % PARAM_ALIGN === 0 && (s.kvHeads * s.headDim) % PARAM_ALIGN === 0;
  }

  /**
   * Run the projections' GEMMs in FP8 from now on: fused, q, k and v as one joined weight read by
   * three GEMMs from one quantised input, which (`saveInput`) the layer keeps as Q(xᵀ) for its
   * backward, which then takes no x; else each projection on its own.
   */
  useFp8(ctx: Fp8Context, saveInput: boolean): void {
    const rows = this.s.batch * this.s.seqLen;
    const s = this.s, q = s.heads * s.headDim, kv = s.kvHeads * s.headDim;
    if (saveInput && !this.fused) throw new Error('attention: only the fused projection keeps its FP8 input');
    if (this.fused) this.fp8 = { ctx, qkv: ctx.linear(this.q.weight, this.qkvWidth, this.q.inFeatures, rows, [q, kv, kv], saveInput) };
    else for (const l of [this.q, this.k, this.v]) l.useFp8(ctx, rows);
    this.o.useFp8(ctx, rows);
  }

  /** Elements of a fused projection row: (H + 2G)·D. */
  private get qkvWidth(): number {
    return (this.s.heads + 2 * this.s.kvHeads) * this.s.headDim;
  }

  /** Wqkv = [Wq; Wk; Wv] (working copy or gradient) as one [1, (H + 2G)·D, dModel] matrix, or its first `width` rows. */
  private wqkv(b: Backend, w: Tensor, width = this.qkvWidth): Tensor {
    return b.view(w, 0, [1, width, this.q.inFeatures]);
  }

  /** The q, k and v parts of a fused projection row: [offset in the row, heads]. */
  private qkvParts(): [number, number][] {
    const s = this.s;
    return [[0, s.heads], [s.heads * s.headDim, s.kvHeads], [(s.heads + s.kvHeads) * s.headDim, s.kvHeads]];
  }

  /** Part (offset, heads) of the rows of scratch.qkv, as attention's backward writes them (gradStride). */
  private qkvSpan(b: Backend, offset: number, heads: number): Tensor {
    const s = this.s;
    return b.view(this.scratch.qkv, offset, stridedRows(s.batch * s.seqLen, this.qkvWidth, heads * s.headDim));
  }

  /** out [rows, dModel] = residual + attention(x [rows, dModel]). */
  forward(b: Backend, x: Tensor, residual: Tensor, out: Tensor, segIds: Tensor, positions: Tensor, causal: boolean): void {
    const s = this.s;
    const rows = s.batch * s.seqLen;
    if (this.fp8) {
      this.projectFp8(b, this.fp8.ctx, this.fp8.qkv, x, positions);
    } else if (this.fused) {
      // q and k = rope(x · [Wq; Wk]ᵀ) into the saved q and k (matmul_rope: on Hopper one
      // kernel that never stores the [rows, (H + G)·D] projection); v = x · Wvᵀ straight into the saved v
      // (one GEMM for all three would leave v to copy).
      const d = this.q.inFeatures, qk = (s.heads + s.kvHeads) * s.headDim;
      b.run(
        matmulRope,
        { x: b.view(x, 0, [rows, d]), w: b.view(this.q.weight.compute, 0, [qk, d]), positions, q: this.savedQ, k: this.savedK },
        { batch: s.batch, seqLen: s.seqLen, heads: s.heads, kvHeads: s.kvHeads, headDim: s.headDim, base: s.ropeBase, inFeatures: d },
      );
      this.v.forward(b, x, b.view(this.savedV, 0, [rows, s.kvHeads * s.headDim]), rows);
    } else {
      this.projectAll(b, x, positions);
    }
    b.run(attention, { q: this.savedQ, k: this.savedK, v: this.savedV, segIds, out: this.savedOut, lse: this.savedLse }, this.attrs(causal));
    this.o.forward(b, as2d(b, this.savedOut), out, rows, residual);
  }

  /**
   * FP8, fused layout: x quantised once; q, k (before rope) and v each one GEMM against its rows
   * of the joined FP8 weight; then rope on q and k.
   */
  private projectFp8(b: Backend, ctx: Fp8Context, l: Fp8Linear, x: Tensor, positions: Tensor): void {
    const s = this.s;
    const sc = this.scratch;
    ctx.forwardParts(l, matrix(x, s.batch * s.seqLen, this.q.inFeatures), [sc.qPre, sc.kPre, this.savedV]);
    b.run(rope, { x: sc.qPre, positions, y: this.savedQ }, this.ropeAttrs(s.heads));
    b.run(rope, { x: sc.kPre, positions, y: this.savedK }, this.ropeAttrs(s.kvHeads));
  }

  /** q, k and v one projection at a time (biases, norms), then rope on q and k. */
  private projectAll(b: Backend, x: Tensor, positions: Tensor): void {
    const s = this.s;
    const sc = this.scratch;
    this.project(b, this.proj.q, x, sc.qPre);
    this.project(b, this.proj.k, x, sc.kPre);
    this.project(b, this.proj.v, x, this.savedV);
    b.run(rope, { x: sc.qPre, positions, y: this.savedQ }, this.ropeAttrs(s.heads));
    b.run(rope, { x: sc.kPre, positions, y: this.savedK }, this.ropeAttrs(s.kvHeads));
  }

  /** dx [rows, dModel] (written) from dout; parameter gradients accumulated. */
  backward(b: Backend, x: Tensor, dout: Tensor, dx: Tensor, segIds: Tensor, positions: Tensor, causal: boolean): void {
    const s = this.s;
    const rows = s.batch * s.seqLen;
    const sc = this.scratch;
    this.o.backward(b, as2d(b, this.savedOut), dout, as2d(b, sc.dAttn), 'write', rows);
    const fused = this.fused, width = this.qkvWidth;
    // dq, dk (turned back through rope) and dv into qkv: fused, into their parts of the rows of
    // one [rows, (H + 2G)·D] gradient; else into its three dense parts
    const [dq, dk, dv] = fused ? this.qkvParts().map(([offset, heads]) => this.qkvSpan(b, offset, heads)) : [sc.qPre, sc.kPre, sc.vPre];
    b.run(
      attentionBackward,
      { q: this.savedQ, k: this.savedK, v: this.savedV, segIds, out: this.savedOut, lse: this.savedLse, dout: sc.dAttn, positions, dq: dq!, dk: dk!, dv: dv! },
      { ...this.attrs(causal), ropeBase: s.ropeBase, ...(fused ? { gradStride: width } : {}), ...(s.deterministic ? { deterministic: true } : {}) },
    );
    if (fused) {
      const d = this.q.inFeatures;
      const dqkv = b.view(sc.qkv, 0, [1, rows, width]);
      // dWqkv [(H + 2G)·D, d] (+)= dqkvᵀ · x;  dx [rows, d] = dqkv · Wqkv
      const accumulate = this.q.weight.store.accumulates(this.q.weight, this.k.weight, this.v.weight);
      if (this.fp8) {
        this.fp8.ctx.backward(this.fp8.qkv, this.fp8.qkv.saved ? null : matrix(x, rows, d), matrix(sc.qkv, rows, width), this.wqkv(b, this.q.weight.grad), accumulate, matrix(dx, rows, d));
        return;
      }
      b.run(matmul, { a: dqkv, b: as3d(b, x), out: this.wqkv(b, this.q.weight.grad) }, matmulAttrs(1, width, d, rows, true, false, { accumulate, outF32: true }));
      b.run(matmul, { a: dqkv, b: this.wqkv(b, this.q.weight.compute), out: as3d(b, dx) }, matmulAttrs(1, rows, d, width, false, false));
      return;
    }
    this.projectBackward(b, this.proj.q, x, sc.qPre, dx, 'write');
    this.projectBackward(b, this.proj.k, x, sc.kPre, dx, 'add');
    this.projectBackward(b, this.proj.v, x, sc.vPre, dx, 'add');
  }

  /**
   * One new token of one sequence against its KV cache (incremental decoding): out [1, dModel] =
   * residual + attention(x [1, dModel]). The token's roped key and its value go into the caches at
   * `pos` first; `positions` [1, 1] holds pos. The first rows of the training buffers serve as scratch.
   */
  decode(b: Backend, x: Tensor, residual: Tensor, out: Tensor, cache: KvCache, pos: number, positions: Tensor): void {
    const s = this.s;
    const D = s.headDim;
    const sc = this.scratch;
    const row = (t: Tensor, heads: number) => b.view(t, 0, [1, 1, heads, D]);
    const cached = (t: Tensor) => b.view(t, pos * cache.stride, [1, 1, s.kvHeads, D]);
    const rope1 = (heads: number) => ({ batch: 1, seqLen: 1, heads, headDim: D, base: s.ropeBase });
    this.project(b, this.proj.q, x, row(sc.qPre, s.heads), 1);
    this.project(b, this.proj.k, x, row(sc.kPre, s.kvHeads), 1);
    this.project(b, this.proj.v, x, cached(cache.v), 1);
    b.run(rope, { x: row(sc.qPre, s.heads), positions, y: row(this.savedQ, s.heads) }, rope1(s.heads));
    b.run(rope, { x: row(sc.kPre, s.kvHeads), positions, y: cached(cache.k) }, rope1(s.kvHeads));
    const attnOut = b.view(this.savedOut, 0, [1, s.heads, D]);
    b.run(
      attentionDecode,
      { q: b.view(this.savedQ, 0, [1, s.heads, D]), k: cache.k, v: cache.v, out: attnOut },
      { batch: 1, heads: s.heads, kvHeads: s.kvHeads, headDim: D, maxLen: cache.k.shape[1]!, length: pos + 1, scale: 1 / Math.sqrt(D), kvStride: cache.stride },
    );
    this.o.forward(b, b.view(attnOut, 0, [1, s.heads * D]), out, 1, residual);
  }

  /** y [rows, 1, heads, D] (or [B, T, heads, D]) = norm(x · Wᵀ + bias), each part as configured. */
  private project(b: Backend, p: Projection, x: Tensor, y: Tensor, rows = this.s.batch * this.s.seqLen): void {
    const lin = p.raw ? b.view(p.raw, 0, [rows, 1, p.heads, this.s.headDim]) : y;
    p.linear.forward(b, x, as2d(b, lin), rows);
    if (p.bias) addRowBias(b, as2d(b, lin), p.bias, this.scratch.ones!, rows);
    if (p.norm) p.norm.forward(b, perHead(b, lin), perHead(b, y), b.view(p.rstd!, 0, [rows * p.heads]), rows * p.heads);
  }

  /** Gradients of `project` from dy; the norm's input gradient goes through scratch.normGrad. */
  private projectBackward(b: Backend, p: Projection, x: Tensor, dy: Tensor, dx: Tensor, mode: 'write' | 'add'): void {
    const rows = this.s.batch * this.s.seqLen;
    let dlin = dy;
    if (p.norm) {
      const spare = b.view(this.scratch.normGrad!, 0, dy.shape);
      p.norm.backward(b, perHead(b, dy), perHead(b, p.raw!), p.rstd!, b.view(this.scratch.zeros!, 0, [spare.size / this.s.headDim, this.s.headDim]), perHead(b, spare), rows * p.heads);
      dlin = spare;
    }
    if (p.bias) accumulateBiasGrad(b, as2d(b, dlin), p.bias, this.scratch.ones!, rows);
    p.linear.backward(b, x, as2d(b, dlin), dx, mode, rows);
  }
}

/** [B, T, H, D] seen as [B·T·H, D]: one row per head, as the per-head norms see it. */
function perHead(b: Backend, t: Tensor): Tensor {
  const D = t.shape[t.shape.length - 1]!;
  return b.view(t, 0, [t.size / D, D]);
}

/** [B, T, H, D] seen as [B·T, H·D]. */
export function as2d(b: Backend, t: Tensor): Tensor {
  const [B, T, H, D] = t.shape as [number, number, number, number];
  return b.view(t, 0, [B * T, H * D]);
}
