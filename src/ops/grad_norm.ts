/**
 * grad_norm: the global L2 norm of a flat gradient buffer and its clip coefficient, both left on
 * the device. `gradScale` (one f32 on the device) undoes a loss scale: the gradients in x are
 * 1/gradScale times the true ones (train.precision fp16), 1 otherwise. out = [norm, gradScale ·
 * clip], norm = ‖x‖₂ · gradScale the true gradient's norm, clip = min(1, maxNorm / (norm + 1e-6)),
 * or 1 when maxNorm is 0 (no clipping). adamw takes this output as its `clip` argument and
 * multiplies the gradient by out[1]: unscaled and clipped in one product, with no host round trip.
 */
import { badAttr, defineOp, randn, requireDims } from './op.js';

export interface GradNormAttrs {
  readonly n: number;
  /** Clip threshold; 0 disables clipping (scale 1). */
  readonly maxNorm: number;
  /** Sampling only: parity inputs get this gradScale (default 1), their x values 1/gradScale times larger. */
  readonly sampledGradScale?: number;
}

/** Added to the norm before dividing, so a zero gradient gives a finite scale. */
export const CLIP_EPS = 1e-6;

export function clipScale(norm: number, maxNorm: number): number {
  return maxNorm > 0 ? Math.min(1, maxNorm / (norm + CLIP_EPS)) : 1;
}

export const gradNorm = defineOp<GradNormAttrs>({
  name: 'grad_norm',
  summary: 'out = [L2 norm of x · gradScale, gradScale · clip scale min(1, maxNorm / (norm + 1e-6))]',
  args: [
    { name: 'x', role: 'in', dtype: 'f32' },
    { name: 'gradScale', role: 'in', dtype: 'f32' },
    { name: 'out', role: 'out', dtype: 'f32' },
  ],
  validate(attrs) {
    requireDims('grad_norm', attrs, ['n']);
    if (!(Number.isFinite(attrs.maxNorm) && attrs.maxNorm >= 0)) badAttr('grad_norm', 'maxNorm', attrs.maxNorm, 'expected a finite number >= 0 (0: no clipping)');
  },
  shapes: ({ n }) => ({ x: [n], gradScale: [1], out: [2] }),
  reference({ x, gradScale, out }, { maxNorm }) {
    let sumsq = 0;
    for (let i = 0; i < x!.length; i++) sumsq += x![i]! * x![i]!;
    const g = gradScale![0]!;
    const norm = Math.sqrt(sumsq) * g;
    out![0] = norm;
    out![1] = g * clipScale(norm, maxNorm);
  },
  cases: (s) =>
    s === 'test'
      ? [
          { label: 'n=1003 no clip', attrs: { n: 1003, maxNorm: 0 } },
          { label: 'n=5000 clipped', attrs: { n: 5000, maxNorm: 1 } },
          { label: 'two-stage n=70001 under max', attrs: { n: 70001, maxNorm: 1e6 } },
          // Whole float4s: CUDA's float4 loads, over segments rounded up to them (cuda/reduce.cuh).
          { label: 'two-stage n=90004 clipped', attrs: { n: 90004, maxNorm: 1 } },
          // Loss-scaled gradients (fp16): the norm and the clip scale of the unscaled ones, times gradScale.
          { label: 'n=5000 clipped, loss scale 2^16', attrs: { n: 5000, maxNorm: 1, sampledGradScale: 2 ** -16 } },
          { label: 'two-stage n=70001 no clip, loss scale 2^10', attrs: { n: 70001, maxNorm: 0, sampledGradScale: 2 ** -10 } },
        ]
      : [{ label: '134M', attrs: { n: 1 << 27, maxNorm: 1 } }],
  sample: (rng, { n, sampledGradScale = 1 }) => ({ x: randn(rng, n, 1 / sampledGradScale), gradScale: Float64Array.of(sampledGradScale) }),
  // f32 partial sums of squares in a fixed tree.
  tolerance: { f32: 1e-5 },
  flops: ({ n }) => 2 * n,
});
