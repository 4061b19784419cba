/**
 * Rotary position embedding in the Hugging Face Llama convention ("rotate_half"). In each head of
 * x [B, T, H, D], element i < D/2 pairs with i + D/2:
 *   y[i]       = x[i] · cos θ − x[i + D/2] · sin θ
 *   y[i + D/2] = x[i + D/2] · cos θ + x[i] · sin θ,   θ = pos · inv_freq[i], inv_freq[i] = base^(−2i/D)
 * Positions are an input [B, T] (i32) because they restart at every packed document.
 * attention_backward applies the transpose, the rotation by −θ (ropeRotate with sign −1), to the
 * q and k gradients.
 *
 * The angle is computed as HF does in fp32: θ = f32(f32(pos) · f32(inv_freq[i])); cos, sin and
 * the rotation are exact (float64) in the reference. The kernel computes inv_freq = base^(−2i/D)
 * through the GPU's exp2, which is good to a few ulp (HF's own fp32 pow and divide are no
 * better), and an inv_freq k ulp off moves θ by about k · |θ| · 2⁻²⁴. With positions below ~5000,
 * as sampled, that gives relative errors up to ~5e-5 (measured on lavapipe); the tolerance is
 * 1e-4, while a wrong pairing, sign or frequency gives errors of order 1.
 */
import type { PhiloxStream } from '../rng/philox.js';
import { numel } from '../tensor.js';
import { BF16_ROUNDED_OUTPUT, F16_ROUNDED_OUTPUT, type RowLayout, badAttr, defineOp, randn, requireDims, stridedRows } from './op.js';

export interface RopeAttrs {
  readonly batch: number;
  readonly seqLen: number;
  readonly heads: number;
  readonly headDim: number;
  readonly base: number;
  /**
   * Elements from one token's heads to the next's in x (xStride) and in y (yStride); default
   * heads · headDim. With either given, that tensor is the flat span of its tokens,
   * [(batch · seqLen − 1) · stride + heads · headDim], and the elements between a token's heads
   * and the next token's are neither read nor written: one fused q/k/v projection's rows are
   * read, and its gradient's rows written, a part at a time.
   */
  readonly xStride?: number;
  readonly yStride?: number;
  /** false: y = x, a strided copy (the v heads of a fused projection). Default true. */
  readonly rotate?: boolean;
}

/** i · exp_hi is exact in the kernel only for pair indices below 2^12. */
const MAX_HEAD_DIM = 8192;

export function validateRope(op: string, attrs: RopeAttrs): void {
  requireDims(op, attrs, ['batch', 'seqLen', 'heads', 'headDim']);
  if (attrs.headDim % 8 !== 0) badAttr(op, 'headDim', attrs.headDim, 'expected a multiple of 8 (each half is loaded as vec4)');
  if (attrs.headDim > MAX_HEAD_DIM) badAttr(op, 'headDim', attrs.headDim, `expected at most ${MAX_HEAD_DIM}`);
  if (typeof attrs.base !== 'number' || !Number.isFinite(attrs.base) || !(attrs.base > 1)) badAttr(op, 'base', attrs.base, 'expected a finite number > 1');
  for (const k of ['xStride', 'yStride'] as const) {
    const v = attrs[k];
    if (v === undefined) continue;
    if (!Number.isInteger(v) || v < attrs.heads * attrs.headDim || v % 4 !== 0) {
      badAttr(op, k, v, `expected a multiple of 4 of at least heads · headDim (${attrs.heads * attrs.headDim})`);
    }
  }
  if (attrs.rotate !== undefined && typeof attrs.rotate !== 'boolean') badAttr(op, 'rotate', attrs.rotate, 'expected true or false');
}

/** Elements between tokens of x and of y. */
export function ropeStrides(a: RopeAttrs): { x: number; y: number } {
  const width = a.heads * a.headDim;
  return { x: a.xStride ?? width, y: a.yStride ?? width };
}

function ropeShapes(a: RopeAttrs): { x: number[]; y: number[]; positions: number[] } {
  const { batch, seqLen, heads, headDim } = a;
  const act = [batch, seqLen, heads, headDim];
  const span = (stride: number | undefined) => (stride === undefined ? act : stridedRows(batch * seqLen, stride, heads * headDim));
  return { x: span(a.xStride), y: span(a.yStride), positions: [batch, seqLen] };
}

/** x's and y's rows, a token's heads each. */
function ropeRows(a: RopeAttrs): { x: RowLayout; y: RowLayout } {
  const width = a.heads * a.headDim, stride = ropeStrides(a);
  return { x: { stride: stride.x, width }, y: { stride: stride.y, width } };
}

/**
 * The reference rotation by sign · θ (sign −1: the transpose), or the copy (rotate false). x and y
 * must not overlap.
 */
export function ropeRotate(x: ArrayLike<number>, positions: ArrayLike<number>, y: Float64Array, a: RopeAttrs, sign: 1 | -1): void {
  const { batch, seqLen, heads, headDim: d, base } = a;
  const half = d / 2;
  const stride = ropeStrides(a);
  for (let n = 0; n < batch * seqLen; n++) {
    const pos = Math.fround(positions[n]!);
    for (let i = 0; i < half; i++) {
      const invFreq = Math.fround(Math.pow(base, (-2 * i) / d));
      const angle = Math.fround(pos * invFreq);
      const c = a.rotate === false ? 1 : Math.cos(angle);
      const s = a.rotate === false ? 0 : sign * Math.sin(angle);
      for (let h = 0; h < heads; h++) {
        const xlo = n * stride.x + h * d + i;
        const ylo = n * stride.y + h * d + i;
        y[ylo] = x[xlo]! * c - x[xlo + half]! * s;
        y[ylo + half] = x[xlo + half]! * c + x[xlo]! * s;
      }
    }
  }
}

/** Packed documents: each row starts inside a document (position up to 4095) and a new document,
 * restarting at 0, begins at any later token with probability 1/32. */
export function samplePositions(rng: PhiloxStream, { batch, seqLen }: { readonly batch: number; readonly seqLen: number }): Int32Array {
  const positions = new Int32Array(batch * seqLen);
  for (let b = 0; b < batch; b++) {
    let pos = rng.int(4096);
    for (let t = 0; t < seqLen; t++) {
      if (t > 0) pos = rng.uniform() < 1 / 32 ? 0 : pos + 1;
      positions[b * seqLen + t] = pos;
    }
  }
  return positions;
}

function ropeCases(scale: 'test' | 'bench'): { label: string; attrs: RopeAttrs }[] {
  const test: [number, number, number, number, number][] = [
    [2, 7, 3, 16, 10000],
    [1, 13, 2, 32, 10000],
    [3, 5, 5, 64, 10000],
    [1, 9, 2, 64, 500000],
  ];
  const shapes = scale === 'test' ? test : [[8, 1024, 12, 64, 10000] as [number, number, number, number, number]];
  const cases: { label: string; attrs: RopeAttrs }[] = shapes.map(([batch, seqLen, heads, headDim, base]) => ({
    label: `B${batch} T${seqLen} H${heads} D${headDim} base ${base}`,
    attrs: { batch, seqLen, heads, headDim, base },
  }));
  // A fused q/k/v projection's parts: q (3 heads of a 7-head row) read and written strided, and
  // v copied out of it; at bench size llama-124m's q out of its [rows, 3 · 768] projection.
  const strided: [string, RopeAttrs][] =
    scale === 'test'
      ? [
          ['strided x and y', { batch: 2, seqLen: 7, heads: 3, headDim: 16, base: 10000, xStride: 112, yStride: 64 }],
          ['copy (rotate false), strided x', { batch: 2, seqLen: 5, heads: 2, headDim: 16, base: 10000, xStride: 112, rotate: false }],
        ]
      : [['q of a fused qkv', { batch: 8, seqLen: 1024, heads: 12, headDim: 64, base: 10000, xStride: 2304 }]];
  for (const [what, attrs] of strided) cases.push({ label: `B${attrs.batch} T${attrs.seqLen} H${attrs.heads} D${attrs.headDim} ${what}`, attrs });
  return cases;
}

// inv_freq a few ulp off at positions < ~5000 (see the header)
const ROPE_TOLERANCE = { f32: 1e-4, bf16: BF16_ROUNDED_OUTPUT, f16: F16_ROUNDED_OUTPUT };
const ropeFlops = ({ batch, seqLen, heads, headDim }: RopeAttrs) => 3 * batch * seqLen * heads * headDim;

export const rope = defineOp<RopeAttrs>({
  name: 'rope',
  summary: 'rotary position embedding (HF rotate_half) of x [B, T, H, D] at positions [B, T]',
  args: [
    { name: 'x', role: 'in', dtype: 'float' },
    { name: 'positions', role: 'in', dtype: 'i32' },
    { name: 'y', role: 'out', dtype: 'float' },
  ],
  floatDtypes: ['f32', 'bf16', 'f16'],
  validate: (attrs) => validateRope('rope', attrs),
  shapes(attrs) {
    const { x, y, positions } = ropeShapes(attrs);
    return { x, positions, y };
  },
  rowLayout: ropeRows,
  reference: ({ x, positions, y }, attrs) => ropeRotate(x!, positions!, y as Float64Array, attrs, 1),
  cases: ropeCases,
  sample: (rng, attrs) => ({ x: randn(rng, numel(ropeShapes(attrs).x)), positions: samplePositions(rng, attrs) }),
  tolerance: ROPE_TOLERANCE,
  flops: ropeFlops,
});
