/**
 * LayerNorm over the last dimension of [rows, dim] activations and its backward (with the
 * residual-stream gradient `dresidual` added to dx).
 *   mean, var over the row;  rstd = 1 / sqrt(var + eps);  xhat = (x − mean) · rstd
 *   y = xhat · weight + bias
 *   dx = rstd · (g − mean(g) − xhat · mean(g · xhat)) + dresidual,  g = dy · weight
 *   dweight = Σ_rows dy · xhat,  dbias = Σ_rows dy
 */
import type { PhiloxStream } from '../rng/philox.js';
import { BF16_ROUNDED_OUTPUT, defineOp, gradientOf, randn } from './op.js';
import { type RowNormAttrs, rowNormCases, sampleWeight, validateRowNorm } from './rmsnorm.js';

function rowStats(x: ArrayLike<number>, mean: Float64Array, rstd: Float64Array, { rows, dim, eps }: RowNormAttrs): void {
  for (let r = 0; r < rows; r++) {
    let s = 0;
    for (let j = 0; j < dim; j++) s += x[r * dim + j]!;
    const mu = s / dim;
    let ss = 0;
    for (let j = 0; j < dim; j++) ss += (x[r * dim + j]! - mu) ** 2;
    mean[r] = mu;
    rstd[r] = 1 / Math.sqrt(ss / dim + eps);
  }
}

/** Rows with an offset and a scale, so the mean and variance both matter. */
function sampleX(rng: PhiloxStream, { rows, dim }: RowNormAttrs): Float64Array {
  const x = randn(rng, rows * dim, 2);
  for (let r = 0; r < rows; r++) {
    const offset = rng.normal();
    for (let j = 0; j < dim; j++) x[r * dim + j]! += offset;
  }
  return x;
}

export const layernorm = defineOp<RowNormAttrs>({
  name: 'layernorm',
  summary: 'y = (x − mean) / sqrt(var + eps) · weight + bias over rows; saves mean and rstd',
  args: [
    { name: 'x', role: 'in', dtype: 'float' },
    { name: 'weight', role: 'in', dtype: 'float' },
    { name: 'bias', role: 'in', dtype: 'float' },
    { name: 'y', role: 'out', dtype: 'float' },
    { name: 'mean', role: 'out', dtype: 'f32' },
    { name: 'rstd', role: 'out', dtype: 'f32' },
  ],
  floatDtypes: ['f32', 'bf16'],
  validate: (attrs) => validateRowNorm('layernorm', attrs),
  shapes: ({ rows, dim }) => ({ x: [rows, dim], weight: [dim], bias: [dim], y: [rows, dim], mean: [rows], rstd: [rows] }),
  reference({ x, weight, bias, y, mean, rstd }, attrs) {
    const { rows, dim } = attrs;
    rowStats(x!, mean as Float64Array, rstd as Float64Array, attrs);
    for (let r = 0; r < rows; r++) {
      for (let j = 0; j < dim; j++) {
        const i = r * dim + j;
        y![i] = (x![i]! - mean![r]!) * rstd![r]! * weight![j]! + bias![j]!;
      }
    }
  },
  cases: rowNormCases,
  sample: (rng, attrs) => ({ x: sampleX(rng, attrs), weight: sampleWeight(rng, attrs.dim), bias: randn(rng, attrs.dim, 0.1) }),
  // f32 tree sums over dim for the mean and the variance
  tolerance: { f32: 1e-6, bf16: BF16_ROUNDED_OUTPUT },
  flops: ({ rows, dim }) => 7 * rows * dim,
});

export const layernormBackward = defineOp<RowNormAttrs>({
  name: 'layernorm_backward',
  summary: 'dx = layernorm′(x)ᵀ dy + dresidual, dweight = Σ_rows dy · xhat, dbias = Σ_rows dy',
  args: [
    { name: 'dy', role: 'in', dtype: 'float' },
    { name: 'x', role: 'in', dtype: 'float' },
    { name: 'weight', role: 'in', dtype: 'float' },
    { name: 'mean', role: 'in', dtype: 'f32' },
    { name: 'rstd', role: 'in', dtype: 'f32' },
    { name: 'dresidual', role: 'in', dtype: 'float' },
    { name: 'dx', role: 'out', dtype: 'float' },
    { name: 'dweight', role: 'out', dtype: 'float' },
    { name: 'dbias', role: 'out', dtype: 'float' },
  ],
  floatDtypes: ['f32', 'bf16'],
  validate: (attrs) => validateRowNorm('layernorm_backward', attrs),
  shapes: ({ rows, dim }) => ({
    dy: [rows, dim], x: [rows, dim], weight: [dim], mean: [rows], rstd: [rows], dresidual: [rows, dim], dx: [rows, dim], dweight: [dim], dbias: [dim],
  }),
  reference({ dy, x, weight, mean, rstd, dresidual, dx, dweight, dbias }, { rows, dim }) {
    const dw = dweight as Float64Array;
    const db = dbias as Float64Array;
    dw.fill(0);
    db.fill(0);
    const xhat = new Float64Array(dim);
    for (let r = 0; r < rows; r++) {
      let sg = 0; // Σ g
      let sgx = 0; // Σ g · xhat
      for (let j = 0; j < dim; j++) {
        const i = r * dim + j;
        xhat[j] = (x![i]! - mean![r]!) * rstd![r]!;
        const g = dy![i]! * weight![j]!;
        sg += g;
        sgx += g * xhat[j]!;
      }
      for (let j = 0; j < dim; j++) {
        const i = r * dim + j;
        dx![i] = rstd![r]! * (dy![i]! * weight![j]! - sg / dim - xhat[j]! * sgx / dim) + dresidual![i]!;
        dw[j] += dy![i]! * xhat[j]!;
        db[j] += dy![i]!;
      }
    }
  },
  cases: rowNormCases,
  sample(rng, attrs) {
    const { rows, dim } = attrs;
    const x = sampleX(rng, attrs);
    const mean = new Float64Array(rows);
    const rstd = new Float64Array(rows);
    rowStats(x, mean, rstd, attrs);
    return { dy: randn(rng, rows * dim), x, weight: sampleWeight(rng, dim), mean, rstd, dresidual: randn(rng, rows * dim) };
  },
  // dweight and dbias sum up to 8192 rows (per-workgroup blocks, then a tree over blocks): measured
  // 1.5e-7 at 8192 x 2048 on lavapipe
  tolerance: { f32: 2e-6, bf16: BF16_ROUNDED_OUTPUT },
  flops: ({ rows, dim }) => 12 * rows * dim,
  gradient: gradientOf<RowNormAttrs, RowNormAttrs>({
    forward: layernorm,
    forwardAttrs: (a) => a,
    // bias only shifts y, so any [dim] values do for it; the backward op has weight at hand
    inputs: { x: 'x', weight: 'weight', bias: 'weight' },
    cotangents: { y: 'dy' },
    grads: { dx: 'x', dweight: 'weight', dbias: 'bias' },
    passthrough: { dx: 'dresidual' },
  }),
});
