/**
 * attention: scaled dot-product attention over [B, T, H, D] tensors with an optional causal mask,
 * document masks for packed sequences (query i sees key j only if segIds agree) and grouped-query
 * heads (q head h reads kv head floor(h / (heads / kvHeads))). The forward saves the log-sum-exp
 * of each query row's scaled scores so the backward can recompute the probabilities.
 */
import { productNT, transposed } from './matmul.js';
import { F16_ROUNDED_OUTPUT, type OpCase, type RefArgs, badAttr, defineOp, gradientOf, randn, requireDims, requireFlags, stridedRows } from './op.js';
import { type RopeAttrs, ropeRotate, samplePositions } from './rope.js';
import type { PhiloxStream } from '../rng/philox.js';

export interface AttentionAttrs {
  readonly batch: number;
  readonly seqLen: number;
  readonly heads: number;
  readonly kvHeads: number;
  readonly headDim: number;
  readonly causal: boolean;
  /** Multiplies q·k; usually 1/sqrt(headDim). */
  readonly scale: number;
  /**
   * Inputs sampled for parity checks and benchmarks pack up to this many documents a batch row
   * (row b holds 1 + b mod documents; default 3). Only sampling reads it: the kernels take the
   * mask from segIds.
   */
  readonly documents?: number;
  /**
   * attention_backward: elements between consecutive tokens of dq, dk and dv (default: their own
   * widths, heads · headDim and kvHeads · headDim), so the three can be the parts of one fused
   * q/k/v gradient's rows; what lies between is left alone.
   */
  readonly gradStride?: number;
  /**
   * attention_backward: q and k are rope's outputs (src/ops/rope.ts) at `positions` with this
   * base, and dq and dk come out turned back (rope_backward's), the gradients of rope's inputs.
   * Without it `positions` is not read.
   */
  readonly ropeBase?: number;
  /**
   * attention_backward: the same bits on every run. The CUDA kernels then compute dQ in a kernel
   * of its own instead of adding each key block's share with atomics (whose order, and so dQ's
   * last bits, varies from run to run); slower. The CPU reference and the WGSL kernels are
   * deterministic whatever it says, and ignore it.
   */
  readonly deterministic?: boolean;
}

/** The largest head dimension the kernels hold in workgroup memory. */
export const MAX_HEAD_DIM = 128;

function validateAttention(op: string, attrs: AttentionAttrs): void {
  requireDims(op, attrs, ['batch', 'seqLen', 'heads', 'kvHeads', 'headDim']);
  const { heads, kvHeads, headDim, scale } = attrs;
  if (heads % kvHeads !== 0) badAttr(op, 'kvHeads', kvHeads, `heads (${heads}) must be a multiple of kvHeads`);
  if (headDim > MAX_HEAD_DIM || headDim % 4 !== 0) badAttr(op, 'headDim', headDim, `expected a multiple of 4 up to ${MAX_HEAD_DIM}`);
  requireFlags(op, attrs, attrs.deterministic === undefined ? ['causal'] : ['causal', 'deterministic']);
  if (typeof scale !== 'number' || !Number.isFinite(scale) || scale <= 0) badAttr(op, 'scale', scale, 'expected a finite positive number');
  const { gradStride, ropeBase } = attrs;
  if (gradStride !== undefined && (!Number.isInteger(gradStride) || gradStride < attrs.heads * headDim || gradStride % 4 !== 0)) {
    badAttr(op, 'gradStride', gradStride, `expected a multiple of 4 of at least heads · headDim (${attrs.heads * headDim})`);
  }
  if (ropeBase !== undefined && (typeof ropeBase !== 'number' || !Number.isFinite(ropeBase) || !(ropeBase > 1))) {
    badAttr(op, 'ropeBase', ropeBase, 'expected a finite number > 1');
  }
  // (rope's kernels, which place and turn the gradients on WebGPU, take head dims of 8s)
  if ((gradStride !== undefined || ropeBase !== undefined) && headDim % 8 !== 0) badAttr(op, 'headDim', headDim, 'expected a multiple of 8 with gradStride or ropeBase');
}

/** Elements between tokens of dq and of dk and dv. */
export function gradStrides(a: AttentionAttrs): { q: number; kv: number } {
  return { q: a.gradStride ?? a.heads * a.headDim, kv: a.gradStride ?? a.kvHeads * a.headDim };
}

/**
 * rope_backward's attributes that place dq (heads) or dk (kvHeads) from rows `xStride` apart into
 * the gradient's rows, turned back through the rope that made q and k (`turn`; else copied, the
 * base unused).
 */
export function gradRope(a: AttentionAttrs, heads: number, xStride: number | undefined, turn = true): RopeAttrs {
  return { batch: a.batch, seqLen: a.seqLen, heads, headDim: a.headDim, base: a.ropeBase ?? 10000, xStride, yStride: a.gradStride, rotate: turn };
}

function attentionShapes({ batch: B, seqLen: T, heads: H, kvHeads: G, headDim: D }: AttentionAttrs) {
  return { q: [B, T, H, D], k: [B, T, G, D], v: [B, T, G, D], segIds: [B, T], out: [B, T, H, D], lse: [B, H, T] };
}

/** Head h's rows of x ([B, T, heads, D]) in batch row b, as a [T, D] array. */
function headRows(x: Float64Array, { seqLen: T, headDim: D }: AttentionAttrs, heads: number, b: number, h: number): Float64Array {
  const rows = new Float64Array(T * D);
  for (let t = 0; t < T; t++) {
    const at = ((b * T + t) * heads + h) * D;
    rows.set(x.subarray(at, at + D), t * D);
  }
  return rows;
}

function logSumExp(s: Float64Array): number {
  let m = -Infinity;
  for (const x of s) m = Math.max(m, x);
  let sum = 0;
  for (const x of s) sum += Math.exp(x - m);
  return m + Math.log(sum);
}

/**
 * The probabilities P ([T, T]) of one head in batch row b from its queries and keys ([T, D] each):
 * the scaled scores, -Infinity (so P = 0) where a query may not attend a key (later keys when
 * causal, other documents'), then exp(s - lse) with each row's log-sum-exp at lse[lseAt + i],
 * written there first when `writeLse` (the forward) or the forward's (the backward).
 */
function probabilities(qh: Float64Array, kh: Float64Array, seg: Int32Array, a: AttentionAttrs, b: number, lse: Float64Array, lseAt: number, writeLse: boolean): Float64Array {
  const { seqLen: T, headDim: D, causal, scale } = a;
  const p = productNT(qh, 0, kh, 0, T, T, D);
  for (let i = 0; i < T; i++) {
    const row = p.subarray(i * T, (i + 1) * T);
    const doc = seg[b * T + i];
    for (let j = 0; j < T; j++) row[j] = (causal && j > i) || seg[b * T + j] !== doc ? -Infinity : row[j]! * scale;
    if (writeLse) lse[lseAt + i] = logSumExp(row);
    const l = lse[lseAt + i]!;
    for (let j = 0; j < T; j++) row[j] = Math.exp(row[j]! - l);
  }
  return p;
}

/** Writes (or adds, `add`) y ([T, D] of head h, times `scale`) into x's rows `stride` apart. */
function scatterHead(y: Float64Array, x: Float64Array, { seqLen: T, headDim: D }: AttentionAttrs, stride: number, b: number, h: number, scale: number, add: boolean): void {
  for (let t = 0; t < T; t++) {
    const at = (b * T + t) * stride + h * D;
    for (let d = 0; d < D; d++) x[at + d] = (add ? x[at + d]! : 0) + y[t * D + d]! * scale;
  }
}

function attentionReference(args: RefArgs, a: AttentionAttrs): void {
  const q = args.q as Float64Array, k = args.k as Float64Array, v = args.v as Float64Array;
  const seg = args.segIds as Int32Array, out = args.out as Float64Array, lse = args.lse as Float64Array;
  const { batch: B, seqLen: T, heads: H, kvHeads: G, headDim: D } = a;
  for (let b = 0; b < B; b++) {
    for (let h = 0; h < H; h++) {
      const kvh = Math.floor(h / (H / G));
      const p = probabilities(headRows(q, a, H, b, h), headRows(k, a, G, b, kvh), seg, a, b, lse, (b * H + h) * T, true);
      // out_i = Σ_j p_ij v_j
      scatterHead(productNT(p, 0, transposed(headRows(v, a, G, b, kvh), 0, T, D), 0, T, D, T), out, a, H * D, b, h, 1, false);
    }
  }
}

function attentionBackwardReference(args: RefArgs, a: AttentionAttrs): void {
  const q = args.q as Float64Array, k = args.k as Float64Array, v = args.v as Float64Array;
  const seg = args.segIds as Int32Array, out = args.out as Float64Array, lse = args.lse as Float64Array;
  const dout = args.dout as Float64Array, dq = args.dq as Float64Array, dk = args.dk as Float64Array, dv = args.dv as Float64Array;
  const { batch: B, seqLen: T, heads: H, kvHeads: G, headDim: D, scale } = a;
  const stride = gradStrides(a);
  for (let b = 0; b < B; b++) {
    for (let h = 0; h < H; h++) {
      const kvh = Math.floor(h / (H / G)), firstOfGroup = h % (H / G) === 0;
      const qh = headRows(q, a, H, b, h), kh = headRows(k, a, G, b, kvh), doh = headRows(dout, a, H, b, h), oh = headRows(out, a, H, b, h);
      const p = probabilities(qh, kh, seg, a, b, lse, (b * H + h) * T, false);
      // dS = P ∘ (dP - D_i), dP = dO · Vᵀ, D_i = rowsum(dO ∘ O); 0 wherever P is
      const ds = productNT(doh, 0, headRows(v, a, G, b, kvh), 0, T, T, D);
      for (let i = 0; i < T; i++) {
        let drow = 0;
        for (let d = 0; d < D; d++) drow += doh[i * D + d]! * oh[i * D + d]!;
        for (let j = 0; j < T; j++) {
          const pij = p[i * T + j]!;
          ds[i * T + j] = pij === 0 ? 0 : pij * (ds[i * T + j]! - drow);
        }
      }
      // dQ = scale · dS · K, dK = scale · dSᵀ · Q, dV = Pᵀ · dO: the group's first head writes dK and
      // dV, the others add to them
      scatterHead(productNT(ds, 0, transposed(kh, 0, T, D), 0, T, D, T), dq, a, stride.q, b, h, scale, false);
      scatterHead(productNT(transposed(ds, 0, T, T), 0, transposed(qh, 0, T, D), 0, T, D, T), dk, a, stride.kv, b, kvh, scale, !firstOfGroup);
      scatterHead(productNT(transposed(p, 0, T, T), 0, transposed(doh, 0, T, D), 0, T, D, T), dv, a, stride.kv, b, kvh, 1, !firstOfGroup);
    }
  }
  if (a.ropeBase === undefined) return;
  const positions = args.positions as Int32Array;
  ropeRotate(dq.slice(), positions, dq, gradRope(a, H, a.gradStride), -1);
  ropeRotate(dk.slice(), positions, dk, gradRope(a, a.kvHeads, a.gradStride), -1);
}

/**
 * Sorted document ids for packed rows: row b holds 1 + (b % maxDocs) documents (so batch row 0 is
 * a single document and later rows exercise the document mask), ids offset by a random base.
 */
function sampleSegIds(rng: PhiloxStream, B: number, T: number, maxDocs: number): Int32Array {
  const seg = new Int32Array(B * T);
  for (let b = 0; b < B; b++) {
    const docs = Math.min(1 + (b % maxDocs), T);
    const cuts = new Set<number>();
    while (cuts.size < docs - 1) cuts.add(1 + rng.int(T - 1));
    let id = rng.int(4);
    for (let t = 0; t < T; t++) {
      if (cuts.has(t)) id++;
      seg[b * T + t] = id;
    }
  }
  return seg;
}

function sampleForward(rng: PhiloxStream, a: AttentionAttrs): RefArgs {
  const s = attentionShapes(a);
  const n = (shape: readonly number[]) => shape.reduce((x, y) => x * y, 1);
  return { q: randn(rng, n(s.q)), k: randn(rng, n(s.k)), v: randn(rng, n(s.v)), segIds: sampleSegIds(rng, a.batch, a.seqLen, a.documents ?? 3) };
}

function attentionCases(scale: 'test' | 'bench'): OpCase<AttentionAttrs>[] {
  const c = (label: string, batch: number, seqLen: number, heads: number, kvHeads: number, headDim: number, causal: boolean, documents = 3): OpCase<AttentionAttrs> => ({
    label,
    attrs: { batch, seqLen, heads, kvHeads, headDim, causal, scale: 1 / Math.sqrt(headDim), documents },
  });
  if (scale === 'test') {
    return [
      c('causal T=37 D=16', 2, 37, 2, 2, 16, true),
      c('bidirectional T=37 D=32', 2, 37, 2, 2, 32, false),
      c('documents causal T=50 D=64', 3, 50, 1, 1, 64, true),
      c('documents bidirectional T=29 D=16', 3, 29, 2, 2, 16, false),
      c('gqa 4/2 causal T=45 D=32', 1, 45, 4, 2, 32, true),
      c('gqa 4/1 bidirectional T=21 D=64', 2, 21, 4, 1, 64, false),
      c('short T=5 D=128 causal', 1, 5, 2, 1, 128, true),
      c('D=20 (padded) bidirectional T=19', 2, 19, 2, 2, 20, false),
    ];
  }
  // One document a row: the work PyTorch's SDPA does in bench/peers/attention_sdpa.py (which
  // parses these rows and skips the one with documents), and the flops counted. The last row
  // times the document mask: its empty tiles are skipped, so its TFLOP/s overstate the work.
  const oneDoc = (label: string, batch: number, seqLen: number, heads: number, kvHeads: number, headDim: number, causal: boolean) =>
    c(label, batch, seqLen, heads, kvHeads, headDim, causal, 1);
  return [
    oneDoc('B8 T1024 H12 D64 causal', 8, 1024, 12, 12, 64, true),
    oneDoc('B8 T1024 H12 D64 bidirectional', 8, 1024, 12, 12, 64, false),
    oneDoc('B4 T2048 H12 D64 causal', 4, 2048, 12, 12, 64, true),
    oneDoc('B4 T2048 H16 D128 causal', 4, 2048, 16, 16, 128, true),
    oneDoc('B4 T2048 H16 D128 bidirectional', 4, 2048, 16, 16, 128, false),
    oneDoc('B4 T2048 H16/4 D128 causal gqa', 4, 2048, 16, 4, 128, true),
    oneDoc('B8 T2048 H16 D128 causal', 8, 2048, 16, 16, 128, true),
    oneDoc('B8 T2048 H16 D128 bidirectional', 8, 2048, 16, 16, 128, false),
    oneDoc('B16 T1024 H12 D64 causal', 16, 1024, 12, 12, 64, true),
    oneDoc('B16 T1024 H12 D64 bidirectional', 16, 1024, 12, 12, 64, false),
    c('B8 T2048 H16 D128 bidirectional 3 documents', 8, 2048, 16, 16, 128, false, 3),
  ];
}

/**
 * attention_backward as the fused model calls it: dq, dk and dv the parts of one q/k/v gradient's
 * rows ([rows, (H + 2G)·D]), dq and dk turned back through rope; at test size also rope alone,
 * and at head dims the CUDA kernels turn in registers (64) and in a pass of their own (40).
 */
function fusedGradCases(scale: 'test' | 'bench'): OpCase<AttentionAttrs>[] {
  const c = (label: string, batch: number, seqLen: number, heads: number, kvHeads: number, headDim: number, causal: boolean, extra: Partial<AttentionAttrs>) => ({
    label,
    attrs: { batch, seqLen, heads, kvHeads, headDim, causal, scale: 1 / Math.sqrt(headDim), ...extra },
  });
  const fused = (heads: number, kvHeads: number, headDim: number) => ({ gradStride: (heads + 2 * kvHeads) * headDim, ropeBase: 10000 });
  if (scale === 'test') {
    return [
      c('gqa 4/2 causal T=45 D=32, fused qkv gradient, rope', 2, 45, 4, 2, 32, true, fused(4, 2, 32)),
      c('documents causal T=50 D=64, fused qkv gradient, rope', 3, 50, 2, 1, 64, true, fused(2, 1, 64)),
      c('bidirectional T=19 D=40, rope', 2, 19, 2, 2, 40, false, { ropeBase: 500 }),
    ];
  }
  return [c('B16 T1024 H12 D64 bidirectional, fused qkv gradient, rope', 16, 1024, 12, 12, 64, false, { documents: 1, ...fused(12, 12, 64) })];
}

/** Matmul flops of the forward, QKᵀ and PV, 2 flops per multiply-add: 4·B·H·T²·D, halved for causal. */
function forwardFlops({ batch, seqLen, heads, headDim, causal }: AttentionAttrs): number {
  return (4 * batch * heads * seqLen * seqLen * headDim) / (causal ? 2 : 1);
}

export const attention = defineOp<AttentionAttrs>({
  name: 'attention',
  summary: 'out = softmax(scale·QKᵀ + mask)·V with causal/document masks and grouped-query heads; lse saved for backward',
  args: [
    { name: 'q', role: 'in', dtype: 'float' },
    { name: 'k', role: 'in', dtype: 'float' },
    { name: 'v', role: 'in', dtype: 'float' },
    { name: 'segIds', role: 'in', dtype: 'i32' },
    { name: 'out', role: 'out', dtype: 'float' },
    { name: 'lse', role: 'out', dtype: 'f32' },
  ],
  floatDtypes: ['f32', 'bf16', 'f16'],
  validate: (attrs) => validateAttention('attention', attrs),
  shapes: attentionShapes,
  reference: attentionReference,
  cases: attentionCases,
  sample: sampleForward,
  // f32: dot products of length D and sums over T keys in f32.
  // bf16: rounding the outputs to bf16 alone costs ~1.5e-3 (the CPU backend in bf16 measures
  // 1.3e-3..1.9e-3 on the test cases); a flash-attention kernel also rounds P to bf16 before the
  // P·V tensor-core product, which brings it to ~2e-3 (cuda/attention/ under the CPU emulator,
  // tests/cuda_emu: at most 2.1e-3 over 6 seeds of the test cases and multi-tile cases). 5e-3 leaves
  // 2.4x headroom and still fails a kernel that gets one row or tile of a case wrong.
  // f16: the CPU's outputs rounded to f16 (no f16 kernel rounds P).
  tolerance: { f32: 2e-5, bf16: 5e-3, f16: F16_ROUNDED_OUTPUT },
  flops: forwardFlops,
});

export const attentionBackward = defineOp<AttentionAttrs>({
  name: 'attention_backward',
  summary: 'dq, dk, dv of attention from dout, recomputing the probabilities from q, k and the saved lse',
  args: [
    { name: 'q', role: 'in', dtype: 'float' },
    { name: 'k', role: 'in', dtype: 'float' },
    { name: 'v', role: 'in', dtype: 'float' },
    { name: 'segIds', role: 'in', dtype: 'i32' },
    { name: 'out', role: 'in', dtype: 'float' },
    { name: 'lse', role: 'in', dtype: 'f32' },
    { name: 'dout', role: 'in', dtype: 'float' },
    { name: 'positions', role: 'in', dtype: 'i32' },
    { name: 'dq', role: 'out', dtype: 'float' },
    { name: 'dk', role: 'out', dtype: 'float' },
    { name: 'dv', role: 'out', dtype: 'float' },
  ],
  floatDtypes: ['f32', 'bf16', 'f16'],
  validate: (attrs) => validateAttention('attention_backward', attrs),
  shapes: (attrs) => {
    const s = attentionShapes(attrs);
    const { gradStride, batch, seqLen, heads, kvHeads, headDim } = attrs;
    const grad = (dense: number[], width: number) => (gradStride === undefined ? dense : stridedRows(batch * seqLen, gradStride, width));
    const dkv = grad(s.k, kvHeads * headDim);
    return { ...s, dout: s.out, positions: s.segIds, dq: grad(s.q, heads * headDim), dk: dkv, dv: dkv };
  },
  rowLayout: (attrs) => {
    const stride = gradStrides(attrs), q = attrs.heads * attrs.headDim, kv = attrs.kvHeads * attrs.headDim;
    return { dq: { stride: stride.q, width: q }, dk: { stride: stride.kv, width: kv }, dv: { stride: stride.kv, width: kv } };
  },
  reference: attentionBackwardReference,
  cases: (scale) => [...attentionCases(scale), ...fusedGradCases(scale)],
  sample(rng, attrs) {
    const inputs = sampleForward(rng, attrs);
    const s = attentionShapes(attrs);
    const fwd: RefArgs = { ...inputs, out: new Float64Array(s.out.reduce((x, y) => x * y, 1)), lse: new Float64Array(s.lse.reduce((x, y) => x * y, 1)) };
    attentionReference(fwd, attrs);
    return { ...fwd, dout: randn(rng, fwd.out!.length), positions: samplePositions(rng, attrs) };
  },
  // dk/dv sum over T queries and the q heads of a group; dq over T keys.
  // bf16: output rounding ~1.7e-3 (CPU backend in bf16), plus P and dS rounded to bf16 before the
  // tensor-core products: cuda/attention/ measures at most 2.6e-3 under the CPU emulator.
  tolerance: { f32: 1e-4, bf16: 6e-3, f16: F16_ROUNDED_OUTPUT },
  // Convention: backward = 2.5× forward (recomputing QKᵀ plus dV, dP, dQ, dK: 5 matmuls vs 2).
  flops: (attrs) => 2.5 * forwardFlops(attrs),
  gradient: gradientOf({
    forward: attention,
    forwardAttrs: (attrs: AttentionAttrs) => attrs,
    inputs: { q: 'q', k: 'k', v: 'v', segIds: 'segIds' },
    cotangents: { out: 'dout' },
    grads: { dq: 'q', dk: 'k', dv: 'v' },
    // attention's own gradient: dense (the stride changes no math), without rope's turn (rope's
    // backward has its own check)
    checkAttrs: ({ gradStride: _stride, ropeBase: _rope, ...plain }) => plain,
    sampleRest: (rng, attrs) => ({ positions: samplePositions(rng, attrs) }),
  }),
});
