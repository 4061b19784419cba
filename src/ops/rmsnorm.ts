/**
 * RMSNorm over the last dimension of [rows, dim] activations and its backward (one op: the
 * residual gradient arrives as `dresidual` and is added to dx).
 *   rstd = 1 / sqrt(mean(x²) + eps),  y = x · rstd · weight
 *   dx = rstd · (g − x · rstd² · mean(g · x)) + dresidual,  g = dy · weight
 *   dweight = Σ_rows dy · x · rstd
 */
import type { PhiloxStream } from '../rng/philox.js';
import { BF16_ROUNDED_OUTPUT, F16_ROUNDED_OUTPUT, badAttr, defineOp, gradientOf, randn, randu, requireDims, requireFlags } from './op.js';

export interface RowNormAttrs {
  readonly rows: number;
  readonly dim: number;
  readonly eps: number;
}

/** rmsnorm_backward's: dweight (+)= the sums, in f32 with outF32 (the master gradient of a bf16 model). */
export interface RmsnormBackwardAttrs extends RowNormAttrs {
  readonly accumulate: boolean;
  readonly outF32: boolean;
}

/** Largest dim the WebGPU kernels keep in registers: 256 threads × 8 vec4 per row. */
const MAX_ROW_NORM_DIM = 8192;

function validateRowNorm(op: string, attrs: RowNormAttrs): void {
  requireDims(op, attrs, ['rows', 'dim']);
  if (attrs.dim % 4 !== 0) badAttr(op, 'dim', attrs.dim, 'expected a multiple of 4 (the kernels load vec4)');
  if (attrs.dim > MAX_ROW_NORM_DIM) badAttr(op, 'dim', attrs.dim, `expected at most ${MAX_ROW_NORM_DIM}`);
  if (typeof attrs.eps !== 'number' || !(attrs.eps >= 0) || !Number.isFinite(attrs.eps)) {
    badAttr(op, 'eps', attrs.eps, 'expected a finite number >= 0');
  }
}

/** Test shapes: rows and dims that are not multiples of the kernels' tiles; 1100 rows make the
 * backward walk several row blocks per workgroup and reduce over many workgroups. */
function rowNormCases(scale: 'test' | 'bench'): { label: string; attrs: RowNormAttrs }[] {
  const shapes = scale === 'test' ? [[7, 36], [7, 100], [1100, 768]] : [[8192, 768], [8192, 2048]];
  return shapes.map(([rows, dim]) => ({ label: `${rows}x${dim}`, attrs: { rows: rows!, dim: dim!, eps: 1e-5 } }));
}

/** Weights near 1 with a spread, as after some training. */
function sampleWeight(rng: PhiloxStream, dim: number): Float64Array {
  return randu(rng, dim, 0.5, 1.5);
}

function rmsRstd(x: ArrayLike<number>, rstd: Float64Array, { rows, dim, eps }: RowNormAttrs): void {
  for (let r = 0; r < rows; r++) {
    let ss = 0;
    for (let j = 0; j < dim; j++) ss += x[r * dim + j]! ** 2;
    rstd[r] = 1 / Math.sqrt(ss / dim + eps);
  }
}

function rmsApply(x: ArrayLike<number>, weight: ArrayLike<number>, rstd: ArrayLike<number>, y: Float64Array, { rows, dim }: RowNormAttrs): void {
  for (let r = 0; r < rows; r++) {
    for (let j = 0; j < dim; j++) y[r * dim + j] = x[r * dim + j]! * rstd[r]! * weight[j]!;
  }
}

const flopsPerElement = (f: number) => ({ rows, dim }: RowNormAttrs) => f * rows * dim;

export const rmsnorm = defineOp<RowNormAttrs>({
  name: 'rmsnorm',
  summary: 'y = x / sqrt(mean(x²) + eps) · weight over rows; saves rstd',
  args: [
    { name: 'x', role: 'in', dtype: 'float' },
    { name: 'weight', role: 'in', dtype: 'float' },
    { name: 'y', role: 'out', dtype: 'float' },
    { name: 'rstd', role: 'out', dtype: 'f32' },
  ],
  floatDtypes: ['f32', 'bf16', 'f16'],
  validate: (attrs) => validateRowNorm('rmsnorm', attrs),
  shapes: ({ rows, dim }) => ({ x: [rows, dim], weight: [dim], y: [rows, dim], rstd: [rows] }),
  reference({ x, weight, y, rstd }, attrs) {
    rmsRstd(x!, rstd as Float64Array, attrs);
    rmsApply(x!, weight!, rstd!, y as Float64Array, attrs);
  },
  cases: rowNormCases,
  sample: (rng, { rows, dim }) => ({ x: randn(rng, rows * dim), weight: sampleWeight(rng, dim) }),
  // f32 sums of dim squares in a tree: error ~ log2(dim) ulp
  tolerance: { f32: 1e-6, bf16: BF16_ROUNDED_OUTPUT, f16: F16_ROUNDED_OUTPUT },
  flops: flopsPerElement(4),
});

export const rmsnormBackward = defineOp<RmsnormBackwardAttrs>({
  name: 'rmsnorm_backward',
  summary: 'dx = rmsnorm′(x)ᵀ dy + dresidual, dweight (+)= Σ_rows dy · x · rstd (accumulate; f32 dweight with outF32)',
  // dweight is read when accumulating, so it is declared inout.
  args: [
    { name: 'dy', role: 'in', dtype: 'float' },
    { name: 'x', role: 'in', dtype: 'float' },
    { name: 'weight', role: 'in', dtype: 'float' },
    { name: 'rstd', role: 'in', dtype: 'f32' },
    { name: 'dresidual', role: 'in', dtype: 'float' },
    { name: 'dx', role: 'out', dtype: 'float' },
    { name: 'dweight', role: 'inout', dtype: 'float' },
  ],
  floatDtypes: ['f32', 'bf16', 'f16'],
  validate: (attrs) => {
    validateRowNorm('rmsnorm_backward', attrs);
    requireFlags('rmsnorm_backward', attrs, ['accumulate', 'outF32']);
  },
  shapes: ({ rows, dim }) => ({ dy: [rows, dim], x: [rows, dim], weight: [dim], rstd: [rows], dresidual: [rows, dim], dx: [rows, dim], dweight: [dim] }),
  argDtype: (arg, { outF32 }) => (arg === 'dweight' && outF32 ? 'f32' : undefined),
  reference({ dy, x, weight, rstd, dresidual, dx, dweight }, { rows, dim, accumulate }) {
    const dw = dweight as Float64Array;
    if (!accumulate) dw.fill(0);
    for (let r = 0; r < rows; r++) {
      const rs = rstd![r]!;
      let gx = 0; // Σ_j dy_j · w_j · x_j
      for (let j = 0; j < dim; j++) gx += dy![r * dim + j]! * weight![j]! * x![r * dim + j]!;
      for (let j = 0; j < dim; j++) {
        const i = r * dim + j;
        dx![i] = rs * dy![i]! * weight![j]! - (rs ** 3 * gx / dim) * x![i]! + dresidual![i]!;
        dw[j] += dy![i]! * x![i]! * rs;
      }
    }
  },
  cases: (scale) => [
    ...rowNormCases(scale).map((c) => ({ ...c, attrs: { ...c.attrs, accumulate: false, outF32: false } })),
    ...(scale === 'test'
      ? [
          { label: 'f32 dweight += 7x100', attrs: { rows: 7, dim: 100, eps: 1e-5, accumulate: true, outF32: true } },
          // a bf16 model's first gradient write of a step (ParamStore.beginGradients)
          { label: 'f32 dweight = 7x100', attrs: { rows: 7, dim: 100, eps: 1e-5, accumulate: false, outF32: true } },
        ]
      : [{ label: 'f32 dweight += 8192x2048', attrs: { rows: 8192, dim: 2048, eps: 1e-5, accumulate: true, outF32: true } }]),
  ],
  sample(rng, attrs) {
    const { rows, dim } = attrs;
    const x = randn(rng, rows * dim);
    const rstd = new Float64Array(rows);
    rmsRstd(x, rstd, attrs);
    return { dy: randn(rng, rows * dim), x, weight: sampleWeight(rng, dim), rstd, dresidual: randn(rng, rows * dim), dweight: randn(rng, dim) };
  },
  // dweight sums up to 8192 rows (per-workgroup blocks, then a tree over blocks): measured
  // 1.5e-7 at 8192 x 2048 on lavapipe
  tolerance: { f32: 2e-6, bf16: BF16_ROUNDED_OUTPUT, f16: F16_ROUNDED_OUTPUT },
  flops: flopsPerElement(10),
  gradient: gradientOf<RmsnormBackwardAttrs, RowNormAttrs>({
    forward: rmsnorm,
    forwardAttrs: ({ rows, dim, eps }) => ({ rows, dim, eps }),
    // The finite differences check the sums; accumulation is checked against the reference.
    checkAttrs: (a) => ({ ...a, accumulate: false }),
    inputs: { x: 'x', weight: 'weight' },
    cotangents: { y: 'dy' },
    grads: { dx: 'x', dweight: 'weight' },
    passthrough: { dx: 'dresidual' },
  }),
});
