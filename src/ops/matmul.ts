/**
 * matmul: out[b] (+)= op(A[b]) · op(B[b]) per batch item, op = identity or transpose. One op covers
 * a linear layer's forward (x·Wᵀ), its input gradient (dy·W, added to what a sibling branch wrote
 * with `accumulate`) and its weight gradient (dyᵀ·x, accumulated straight into the f32 master
 * gradient with `accumulate` and `outF32` under bf16 activations: no scratch, no extra add).
 * matmul_add (below) writes residual + the product: a residual add in the GEMM.
 */
import { type Shape, numel } from '../tensor.js';
import { BF16_ROUNDED_OUTPUT, F16_ROUNDED_OUTPUT, type RefArray, defineOp, randn, requireDims, requireFlags } from './op.js';

export interface MatmulAttrs {
  readonly batch: number;
  readonly m: number;
  readonly n: number;
  readonly k: number;
  /** a is stored [batch, k, m] (use Aᵀ) instead of [batch, m, k]. */
  readonly transA: boolean;
  /** b is stored [batch, n, k] (use Bᵀ) instead of [batch, k, n]. */
  readonly transB: boolean;
  /** out += the product (GEMM beta = 1) instead of out = the product. */
  readonly accumulate: boolean;
  /** out is f32 whatever a and b are (bf16 inputs, f32 result); else out has their dtype. */
  readonly outF32: boolean;
}

/** matmul_add's attributes: a plain product's (no accumulate, out in the inputs' dtype). */
export type MatmulAddAttrs = Omit<MatmulAttrs, 'accumulate' | 'outF32'>;

/** Attributes of a plain product (no accumulation, out in the inputs' dtype) unless `extra` says so. */
export function matmulAttrs(batch: number, m: number, n: number, k: number, transA = false, transB = false, extra: Partial<Pick<MatmulAttrs, 'accumulate' | 'outF32'>> = {}): MatmulAttrs {
  return { batch, m, n, k, transA, transB, accumulate: false, outF32: false, ...extra };
}
const mm = matmulAttrs;

function matmulShapes({ batch, m, n, k, transA, transB }: MatmulAddAttrs): Record<'a' | 'b' | 'out', Shape> {
  return {
    a: transA ? [batch, k, m] : [batch, m, k],
    b: transB ? [batch, n, k] : [batch, k, n],
    out: [batch, m, n],
  };
}

/**
 * The float64 products out[i·n + j] = Σ_l a[aAt + i·k + l] · b[bAt + j·k + l] (rows of a against
 * rows of b), each summed over l in order: the references' GEMM. Blocks of 4 × 4 outputs as 16
 * independent sums (the same sums, bit for bit, several times faster than one add chain at a time),
 * then the edge rows and columns one output at a time.
 */
export function productNT(a: RefArray, aAt: number, b: RefArray, bAt: number, m: number, n: number, k: number): Float64Array {
  const out = new Float64Array(m * n);
  const dot = (i: number, j: number): number => {
    let s = 0;
    for (let l = 0; l < k; l++) s += a[aAt + i * k + l]! * b[bAt + j * k + l]!;
    return s;
  };
  const m4 = m - (m % 4), n4 = n - (n % 4);
  for (let i = 0; i < m4; i += 4) {
    const a0 = aAt + i * k, a1 = a0 + k, a2 = a1 + k, a3 = a2 + k;
    for (let j = 0; j < n4; j += 4) {
      const b0 = bAt + j * k, b1 = b0 + k, b2 = b1 + k, b3 = b2 + k;
      let s00 = 0, s01 = 0, s02 = 0, s03 = 0, s10 = 0, s11 = 0, s12 = 0, s13 = 0;
      let s20 = 0, s21 = 0, s22 = 0, s23 = 0, s30 = 0, s31 = 0, s32 = 0, s33 = 0;
      for (let l = 0; l < k; l++) {
        const x0 = a[a0 + l]!, x1 = a[a1 + l]!, x2 = a[a2 + l]!, x3 = a[a3 + l]!;
        const y0 = b[b0 + l]!, y1 = b[b1 + l]!, y2 = b[b2 + l]!, y3 = b[b3 + l]!;
        s00 += x0 * y0; s01 += x0 * y1; s02 += x0 * y2; s03 += x0 * y3;
        s10 += x1 * y0; s11 += x1 * y1; s12 += x1 * y2; s13 += x1 * y3;
        s20 += x2 * y0; s21 += x2 * y1; s22 += x2 * y2; s23 += x2 * y3;
        s30 += x3 * y0; s31 += x3 * y1; s32 += x3 * y2; s33 += x3 * y3;
      }
      const o0 = i * n + j, o1 = o0 + n, o2 = o1 + n, o3 = o2 + n;
      out[o0] = s00; out[o0 + 1] = s01; out[o0 + 2] = s02; out[o0 + 3] = s03;
      out[o1] = s10; out[o1 + 1] = s11; out[o1 + 2] = s12; out[o1 + 3] = s13;
      out[o2] = s20; out[o2 + 1] = s21; out[o2 + 2] = s22; out[o2 + 3] = s23;
      out[o3] = s30; out[o3 + 1] = s31; out[o3 + 2] = s32; out[o3 + 3] = s33;
    }
    for (let r = i; r < i + 4; r++) for (let j = n4; j < n; j++) out[r * n + j] = dot(r, j);
  }
  for (let i = m4; i < m; i++) for (let j = 0; j < n; j++) out[i * n + j] = dot(i, j);
  return out;
}

/** x [rows, cols] transposed into a new [cols, rows] array. */
export function transposed(x: RefArray, at: number, rows: number, cols: number): Float64Array {
  const t = new Float64Array(rows * cols);
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) t[c * rows + r] = x[at + r * cols + c]!;
  return t;
}

/**
 * out = addend + op(a) · op(b) per batch item (no addend: the product alone), in float64: op(A)
 * by rows and op(B) by columns, transposed where stored the other way, into productNT. addend may
 * be out itself.
 */
function matmulReference(a: RefArray, b: RefArray, out: RefArray, addend: RefArray | null, { batch, m, n, k, transA, transB }: MatmulAddAttrs): void {
  for (let p = 0; p < batch; p++) {
    const ao = p * m * k;
    const bo = p * k * n;
    const product = productNT(transA ? transposed(a, ao, k, m) : a, transA ? 0 : ao, transB ? b : transposed(b, bo, k, n), transB ? bo : 0, m, n, k);
    for (let i = 0; i < m * n; i++) {
      const o = p * m * n + i;
      out[o] = addend ? addend[o]! + product[i]! : product[i]!;
    }
  }
}

export const matmul = defineOp<MatmulAttrs>({
  name: 'matmul',
  summary: 'out[b] (+)= op(a[b]) · op(b[b]), op = identity or transpose (transA, transB), f32 accumulation; out += with accumulate, f32 out under bf16 inputs with outF32',
  // out is read when accumulating, so it is declared inout (a plain product ignores its old value).
  args: [
    { name: 'a', role: 'in', dtype: 'float' },
    { name: 'b', role: 'in', dtype: 'float' },
    { name: 'out', role: 'inout', dtype: 'float' },
  ],
  floatDtypes: ['f32', 'bf16', 'f16'],
  validate(attrs) {
    requireDims('matmul', attrs, ['batch', 'm', 'n', 'k']);
    requireFlags('matmul', attrs, ['transA', 'transB', 'accumulate', 'outF32']);
  },
  shapes: matmulShapes,
  argDtype: (arg, { outF32 }) => (arg === 'out' && outF32 ? 'f32' : undefined),
  reference({ a, b, out }, attrs) {
    matmulReference(a!, b!, out!, attrs.accumulate ? out! : null, attrs);
  },
  // Sizes off the 128/64-row, 128-column and 8-deep tiles; large batches and single products.
  cases: (scale) =>
    scale === 'test'
      ? [
          { label: 'a·b 67x45x33', attrs: mm(1, 67, 45, 33) },
          { label: 'a·bᵀ 67x45x33', attrs: mm(1, 67, 45, 33, false, true) },
          { label: 'aᵀ·b 67x45x33', attrs: mm(1, 67, 45, 33, true, false) },
          { label: 'aᵀ·bᵀ batch 3 70x130x19', attrs: mm(3, 70, 130, 19, true, true) },
          { label: '1x1x1', attrs: mm(1, 1, 1, 1) },
          { label: 'k < tile depth 5x3x3 aᵀ', attrs: mm(2, 5, 3, 3, true, false) },
          { label: 'a·b batch 2 130x260x20 (two tiles each way)', attrs: mm(2, 130, 260, 20) },
          // every extent a multiple of 4: the WebGPU kernel takes vec4 loads on interior tiles
          { label: 'aᵀ·bᵀ batch 2 132x260x40 (vec4 interior, ragged edges)', attrs: mm(2, 132, 260, 40, true, true) },
          { label: 'batch 600 20x21x9 a·bᵀ', attrs: mm(600, 20, 21, 9, false, true) },
          { label: 'batch 600 20x21x9 aᵀ·b', attrs: mm(600, 20, 21, 9, true, false) },
          { label: 'out += a·bᵀ 67x45x33', attrs: mm(1, 67, 45, 33, false, true, { accumulate: true }) },
          { label: 'f32 out += aᵀ·b batch 2 70x130x19 (weight gradient)', attrs: mm(2, 70, 130, 19, true, false, { accumulate: true, outF32: true }) },
          { label: 'f32 out = a·b 67x45x33', attrs: mm(1, 67, 45, 33, false, false, { outF32: true }) },
        ]
      : [
          { label: '1024³', attrs: mm(1, 1024, 1024, 1024) },
          { label: '2048³', attrs: mm(1, 2048, 2048, 2048) },
          { label: '4096³', attrs: mm(1, 4096, 4096, 4096) },
          { label: 'linear forward x·Wᵀ 8192x3072x768', attrs: mm(1, 8192, 3072, 768, false, true) },
          { label: 'linear dx = dy·W 8192x768x3072', attrs: mm(1, 8192, 768, 3072) },
          { label: 'linear dW += dyᵀ·x 768x3072x8192, f32 out', attrs: mm(1, 768, 3072, 8192, true, false, { accumulate: true, outF32: true }) },
        ],
  sample: (rng, attrs) => {
    const s = matmulShapes(attrs);
    return { a: randn(rng, numel(s.a)), b: randn(rng, numel(s.b)), out: randn(rng, numel(s.out)) };
  },
  // f32 rounding error of a k-term dot product grows like eps·sqrt(k) for random signs:
  // 6e-8·sqrt(8192) ≈ 5e-6 at the longest bench sum; 2e-5 leaves a 4x margin.
  // bf16 in and out, f32 accumulation: products of bf16 values are exact in f32, the f32 sum adds
  // ~5e-6 as above, and the one rounding to bf16 at most 2^-8 ≈ 3.9e-3: within 4e-3 (an f32 out
  // skips that rounding; accumulating adds one f32 addition before it).
  tolerance: { f32: 2e-5, bf16: BF16_ROUNDED_OUTPUT, f16: F16_ROUNDED_OUTPUT },
  flops: ({ batch, m, n, k }) => 2 * batch * m * n * k,
});

export function matmulAddAttrs(batch: number, m: number, n: number, k: number, transA = false, transB = false): MatmulAddAttrs {
  return { batch, m, n, k, transA, transB };
}
const ma = matmulAddAttrs;

/**
 * matmul_add: out = residual + op(a) · op(b), GEMM's C ≠ D with beta = 1. A decoder block's output
 * projections write the residual stream's next value with it, so the norm that follows reads one
 * tensor instead of adding two (one activation pass fewer a residual add).
 */
export const matmulAdd = defineOp<MatmulAddAttrs>({
  name: 'matmul_add',
  summary: 'out[b] = residual[b] + op(a[b]) · op(b[b]), op = identity or transpose (transA, transB), f32 accumulation, one rounding',
  args: [
    { name: 'a', role: 'in', dtype: 'float' },
    { name: 'b', role: 'in', dtype: 'float' },
    { name: 'residual', role: 'in', dtype: 'float' },
    { name: 'out', role: 'out', dtype: 'float' },
  ],
  floatDtypes: ['f32', 'bf16', 'f16'],
  validate(attrs) {
    requireDims('matmul_add', attrs, ['batch', 'm', 'n', 'k']);
    requireFlags('matmul_add', attrs, ['transA', 'transB']);
  },
  shapes: (attrs) => {
    const s = matmulShapes(attrs);
    return { ...s, residual: s.out };
  },
  reference({ a, b, residual, out }, attrs) {
    matmulReference(a!, b!, out!, residual!, attrs);
  },
  // The decoder block's two shapes (x·Wᵀ; the MLP's down projection from the stored hᵀ, aᵀ·bᵀ)
  // off the tiles, and a batch.
  cases: (scale) =>
    scale === 'test'
      ? [
          { label: 'r + a·bᵀ 67x45x33', attrs: ma(1, 67, 45, 33, false, true) },
          { label: 'r + aᵀ·bᵀ 70x130x19', attrs: ma(1, 70, 130, 19, true, true) },
          { label: 'r + a·b batch 2 130x260x20', attrs: ma(2, 130, 260, 20) },
        ]
      : [
          { label: 'attention output x·Wᵀ + r 16384x768x768', attrs: ma(1, 16384, 768, 768, false, true) },
          { label: 'down projection hᵀᵀ·Wᵀ + r 16384x768x2048', attrs: ma(1, 16384, 768, 2048, true, true) },
        ],
  sample: (rng, attrs) => {
    const s = matmulShapes(attrs);
    return { a: randn(rng, numel(s.a)), b: randn(rng, numel(s.b)), residual: randn(rng, numel(s.out)) };
  },
  // As matmul's, plus the residual's one f32 addition before the rounding.
  tolerance: { f32: 2e-5, bf16: BF16_ROUNDED_OUTPUT, f16: F16_ROUNDED_OUTPUT },
  flops: ({ batch, m, n, k }) => 2 * batch * m * n * k,
});
