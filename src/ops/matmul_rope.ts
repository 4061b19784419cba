/**
 * matmul_rope: the attention's q/k projection and rope in one op. [q | k] = x · Wqkᵀ
 * (Wqk = [Wq; Wk], [(heads + kvHeads)·headDim, inFeatures]), each turned by rope (src/ops/rope.ts)
 * at its token's position, into q [B, T, heads, D] and k [B, T, kvHeads, D]. A backend may fuse
 * the two (CUDA on Hopper: cuda/gemm/gemm_ws.cuh's rope epilogue turns the products as they leave
 * the accumulators, so the [rows, (H + G)·D] projection is never stored and rope never reads it
 * back); the result is that of matmul then rope, up to the rounding of the product in between.
 */
import { numel } from '../tensor.js';
import { productNT } from './matmul.js';
import { BF16_ROUNDED_OUTPUT, F16_ROUNDED_OUTPUT, type OpCase, defineOp, randn, requireDims } from './op.js';
import { ropeRotate, samplePositions, validateRope } from './rope.js';

export interface MatmulRopeAttrs {
  readonly batch: number;
  readonly seqLen: number;
  /** Heads of q, and of k. */
  readonly heads: number;
  readonly kvHeads: number;
  readonly headDim: number;
  /** rope's base. */
  readonly base: number;
  /** The contraction: x's features (dModel). */
  readonly inFeatures: number;
}

// Hopper's fused path wants head dim 64 or 128, the q columns a multiple of 128 and inFeatures a
// multiple of 8: the first two cases (tails of the 128-row tiles; grouped-query k), then the
// unfused path (head dim 16).
function cases(scale: 'test' | 'bench'): readonly OpCase<MatmulRopeAttrs>[] {
  const shapes: [string, MatmulRopeAttrs][] =
    scale === 'test'
      ? [
          ['D64 GQA tails', { batch: 2, seqLen: 96, heads: 4, kvHeads: 2, headDim: 64, base: 10000, inFeatures: 72 }],
          ['D128', { batch: 1, seqLen: 136, heads: 2, kvHeads: 2, headDim: 128, base: 500000, inFeatures: 64 }],
          ['D16 (unfused)', { batch: 2, seqLen: 7, heads: 3, kvHeads: 1, headDim: 16, base: 10000, inFeatures: 24 }],
        ]
      : [
          ['llama-124m', { batch: 16, seqLen: 1024, heads: 12, kvHeads: 12, headDim: 64, base: 10000, inFeatures: 768 }],
          ['llama-1.3b', { batch: 8, seqLen: 2048, heads: 16, kvHeads: 16, headDim: 128, base: 10000, inFeatures: 2048 }],
        ];
  return shapes.map(([what, a]) => ({ label: `${what}: B${a.batch} T${a.seqLen} H${a.heads}/${a.kvHeads} D${a.headDim} in ${a.inFeatures}`, attrs: a }));
}

function shapes({ batch, seqLen, heads, kvHeads, headDim, inFeatures }: MatmulRopeAttrs) {
  return {
    x: [batch * seqLen, inFeatures],
    w: [(heads + kvHeads) * headDim, inFeatures],
    positions: [batch, seqLen],
    q: [batch, seqLen, heads, headDim],
    k: [batch, seqLen, kvHeads, headDim],
  };
}

export const matmulRope = defineOp<MatmulRopeAttrs>({
  name: 'matmul_rope',
  summary: '[q | k] = rope(x · wᵀ) at positions [B, T]: the q/k projection (w = [Wq; Wk]) and rope in one',
  args: [
    { name: 'x', role: 'in', dtype: 'float' },
    { name: 'w', role: 'in', dtype: 'float' },
    { name: 'positions', role: 'in', dtype: 'i32' },
    { name: 'q', role: 'out', dtype: 'float' },
    { name: 'k', role: 'out', dtype: 'float' },
  ],
  floatDtypes: ['f32', 'bf16', 'f16'],
  validate(attrs) {
    requireDims('matmul_rope', attrs, ['kvHeads', 'inFeatures']);
    validateRope('matmul_rope', attrs);
  },
  shapes,
  reference({ x, w, positions, q, k }, attrs) {
    const { batch, seqLen, heads, kvHeads, headDim: d, inFeatures } = attrs;
    const rows = batch * seqLen, n = (heads + kvHeads) * d;
    // The product as f32 storage holds it (matmul then rope exactly, in f32), then rope on each part.
    const qk = productNT(x!, 0, w!, 0, rows, n, inFeatures).map(Math.fround);
    const rope = { batch, seqLen, headDim: d, base: attrs.base, xStride: n };
    ropeRotate(qk, positions!, q as Float64Array, { ...rope, heads }, 1);
    ropeRotate(qk.subarray(heads * d), positions!, k as Float64Array, { ...rope, heads: kvHeads }, 1);
  },
  cases,
  sample: (rng, attrs) => ({
    x: randn(rng, numel(shapes(attrs).x)),
    w: randn(rng, numel(shapes(attrs).w), 1 / Math.sqrt(attrs.inFeatures)),
    positions: samplePositions(rng, attrs),
  }),
  // rope's (inv_freq a few ulp off) over matmul's f32 sums; under bf16 one rounding of the output
  // (the fused path) or two (the product's, then rope's), within the same bound.
  tolerance: { f32: 1e-4, bf16: BF16_ROUNDED_OUTPUT, f16: F16_ROUNDED_OUTPUT },
  flops: ({ batch, seqLen, heads, kvHeads, headDim, inFeatures }) => 2 * batch * seqLen * (heads + kvHeads) * headDim * inFeatures,
});
