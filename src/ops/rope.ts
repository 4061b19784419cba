/**
 * Rotary position embedding in the Hugging Face Llama convention ("rotate_half"). In each head of
 * x [B, T, H, D], element i < D/2 pairs with i + D/2:
 *   y[i]       = x[i] · cos θ − x[i + D/2] · sin θ
 *   y[i + D/2] = x[i + D/2] · cos θ + x[i] · sin θ,   θ = pos · inv_freq[i], inv_freq[i] = base^(−2i/D)
 * Positions are an input [B, T] (i32) because they restart at every packed document.
 * rope_backward applies the transpose, the rotation by −θ.
 *
 * The angle is computed as HF does in fp32: θ = f32(f32(pos) · f32(inv_freq[i])); cos, sin and
 * the rotation are exact (float64) in the reference. The kernel computes inv_freq = base^(−2i/D)
 * through the GPU's exp2, which is good to a few ulp (HF's own fp32 pow and divide are no
 * better), and an inv_freq k ulp off moves θ by about k · |θ| · 2⁻²⁴. With positions below ~5000,
 * as sampled, that gives relative errors up to ~5e-5 (measured on lavapipe); the tolerance is
 * 1e-4, while a wrong pairing, sign or frequency gives errors of order 1.
 */
import type { PhiloxStream } from '../rng/philox.js';
import { BF16_ROUNDED_OUTPUT, badAttr, defineOp, gradientOf, randn, requireDims } from './op.js';

export interface RopeAttrs {
  readonly batch: number;
  readonly seqLen: number;
  readonly heads: number;
  readonly headDim: number;
  readonly base: number;
}

/** i · exp_hi is exact in the kernel only for pair indices below 2^12. */
const MAX_HEAD_DIM = 8192;

function validateRope(op: string, attrs: RopeAttrs): void {
  requireDims(op, attrs, ['batch', 'seqLen', 'heads', 'headDim']);
  if (attrs.headDim % 8 !== 0) badAttr(op, 'headDim', attrs.headDim, 'expected a multiple of 8 (each half is loaded as vec4)');
  if (attrs.headDim > MAX_HEAD_DIM) badAttr(op, 'headDim', attrs.headDim, `expected at most ${MAX_HEAD_DIM}`);
  if (typeof attrs.base !== 'number' || !Number.isFinite(attrs.base) || !(attrs.base > 1)) badAttr(op, 'base', attrs.base, 'expected a finite number > 1');
}

function ropeShapes({ batch, seqLen, heads, headDim }: RopeAttrs): { act: number[]; positions: number[] } {
  return { act: [batch, seqLen, heads, headDim], positions: [batch, seqLen] };
}

/** The reference rotation by sign · θ (sign −1: the transpose). */
function rotate(x: ArrayLike<number>, positions: ArrayLike<number>, y: Float64Array, a: RopeAttrs, sign: 1 | -1): void {
  const { batch, seqLen, heads, headDim: d, base } = a;
  const half = d / 2;
  for (let n = 0; n < batch * seqLen; n++) {
    const pos = Math.fround(positions[n]!);
    for (let i = 0; i < half; i++) {
      const invFreq = Math.fround(Math.pow(base, (-2 * i) / d));
      const angle = Math.fround(pos * invFreq);
      const c = Math.cos(angle);
      const s = sign * Math.sin(angle);
      for (let h = 0; h < heads; h++) {
        const lo = (n * heads + h) * d + i;
        const hi = lo + half;
        y[lo] = x[lo]! * c - x[hi]! * s;
        y[hi] = x[hi]! * c + x[lo]! * s;
      }
    }
  }
}

/** Packed documents: each row starts inside a document (position up to 4095) and a new document,
 * restarting at 0, begins at any later token with probability 1/32. */
export function samplePositions(rng: PhiloxStream, { batch, seqLen }: RopeAttrs): Int32Array {
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
  return shapes.map(([batch, seqLen, heads, headDim, base]) => ({
    label: `B${batch} T${seqLen} H${heads} D${headDim} base ${base}`,
    attrs: { batch, seqLen, heads, headDim, base },
  }));
}

// inv_freq a few ulp off at positions < ~5000 (see the header)
const ROPE_TOLERANCE = { f32: 1e-4, bf16: BF16_ROUNDED_OUTPUT };
const ropeFlops = ({ batch, seqLen, heads, headDim }: RopeAttrs) => 3 * batch * seqLen * heads * headDim;

export const rope = defineOp<RopeAttrs>({
  name: 'rope',
  summary: 'rotary position embedding (HF rotate_half) of x [B, T, H, D] at positions [B, T]',
  args: [
    { name: 'x', role: 'in', dtype: 'float' },
    { name: 'positions', role: 'in', dtype: 'i32' },
    { name: 'y', role: 'out', dtype: 'float' },
  ],
  floatDtypes: ['f32', 'bf16'],
  validate: (attrs) => validateRope('rope', attrs),
  shapes(attrs) {
    const { act, positions } = ropeShapes(attrs);
    return { x: act, positions, y: act };
  },
  reference: ({ x, positions, y }, attrs) => rotate(x!, positions!, y as Float64Array, attrs, 1),
  cases: ropeCases,
  sample: (rng, attrs) => ({ x: randn(rng, attrs.batch * attrs.seqLen * attrs.heads * attrs.headDim), positions: samplePositions(rng, attrs) }),
  tolerance: ROPE_TOLERANCE,
  flops: ropeFlops,
});

export const ropeBackward = defineOp<RopeAttrs>({
  name: 'rope_backward',
  summary: 'dx = rope(x)ᵀ dy: rotation of dy by −θ',
  args: [
    { name: 'dy', role: 'in', dtype: 'float' },
    { name: 'positions', role: 'in', dtype: 'i32' },
    { name: 'dx', role: 'out', dtype: 'float' },
  ],
  floatDtypes: ['f32', 'bf16'],
  validate: (attrs) => validateRope('rope_backward', attrs),
  shapes(attrs) {
    const { act, positions } = ropeShapes(attrs);
    return { dy: act, positions, dx: act };
  },
  reference: ({ dy, positions, dx }, attrs) => rotate(dy!, positions!, dx as Float64Array, attrs, -1),
  cases: ropeCases,
  sample: (rng, attrs) => ({ dy: randn(rng, attrs.batch * attrs.seqLen * attrs.heads * attrs.headDim), positions: samplePositions(rng, attrs) }),
  tolerance: ROPE_TOLERANCE,
  flops: ropeFlops,
  gradient: gradientOf<RopeAttrs, RopeAttrs>({
    forward: rope,
    forwardAttrs: (a) => a,
    // rope is linear in x, so the point where its gradient is taken does not matter: dy serves
    inputs: { x: 'dy', positions: 'positions' },
    cotangents: { y: 'dy' },
    grads: { dx: 'x' },
  }),
});
