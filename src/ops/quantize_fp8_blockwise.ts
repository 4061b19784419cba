/**
 * quantize_fp8_blockwise: out = fp8(x · scale) with a scale per block (the DeepSeek-V3 recipe,
 * Transformer Engine's Float8BlockScaling), always from the block's own amax (current scaling):
 * scale = pow2Scale(block amax, format, margin) as src/ops/fp8.ts defines it, 1 for a block of
 * zeros. Blocks run along the rows of out, which is x [rows, cols] or, with `transpose`, xᵀ
 * [cols, rows] (the operand layout an FP8 GEMM's other product needs: both operands have the
 * summed dimension contiguous, and the blocks run along it):
 * - '1x128': one scale per row of out and 128 consecutive columns (activations, gradients);
 * - '128x128': one scale per 128 x 128 tile of out (weights).
 * Blocks at the right and bottom edges may be partial.
 *
 * scaleInv holds each block's dequantisation factor 1 / scale (exact: powers of two), laid out as
 * cuBLASLt's block-scaled FP8 GEMM reads it (CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F and
 * BLK128x128_32F, with Transformer Engine's padding), so that matmul_fp8 takes it as it is; for
 * out [R, C] (blockScaleShape):
 * - '1x128': [ceil(C / 128), roundUp(R, 4)], the factor of out[r, c] at
 *   (c / 128) · roundUp(R, 4) + r: a column block's factors for every row are contiguous;
 * - '128x128': [ceil(R / 128), roundUp(ceil(C / 128), 4)], the factor of out[r, c] at
 *   (r / 128) · roundUp(ceil(C / 128), 4) + c / 128.
 * The padding (rows rounded up to whole 16-byte lines of factors) holds 0.
 */
import { numel } from '../tensor.js';
import { FP8_FORMAT, type Fp8Format, inversePow2, pow2Scale, quantizeValue, requireFormat } from './fp8.js';
import { badAttr, defineOp, randn, requireDims, requireFlags } from './op.js';

export const FP8_BLOCKS = ['1x128', '128x128'] as const;
export type Fp8Block = (typeof FP8_BLOCKS)[number];

/** The length of a block along a row (both shapes) and, for '128x128', down a column. */
export const FP8_BLOCK_LEN = 128;

const roundUp = (v: number, to: number): number => Math.ceil(v / to) * to;

export function requireBlock(op: string, key: string, v: unknown, extra: readonly string[] = []): void {
  const allowed = [...extra, ...FP8_BLOCKS];
  if (!allowed.includes(v as string)) badAttr(op, key, v, `expected one of ${allowed.join(', ')}`);
}

/** scaleInv's shape for an operand [rows, cols] with blocks along its rows (the module comment). */
export function blockScaleShape(rows: number, cols: number, block: Fp8Block): [number, number] {
  const L = FP8_BLOCK_LEN;
  return block === '1x128' ? [Math.ceil(cols / L), roundUp(rows, 4)] : [Math.ceil(rows / L), roundUp(Math.ceil(cols / L), 4)];
}

/** Where in scaleInv the factor of element (r, c) of an operand [rows, cols] is. */
export function blockScaleIndex(r: number, c: number, rows: number, cols: number, block: Fp8Block): number {
  const L = FP8_BLOCK_LEN;
  const [, ld] = blockScaleShape(rows, cols, block);
  return block === '1x128' ? Math.floor(c / L) * ld + r : Math.floor(r / L) * ld + Math.floor(c / L);
}

export interface QuantizeFp8BlockwiseAttrs {
  readonly rows: number;
  readonly cols: number;
  readonly format: Fp8Format;
  /** out is xᵀ [cols, rows] quantised, blocks along its rows, instead of x [rows, cols]. */
  readonly transpose: boolean;
  readonly block: Fp8Block;
  /** Each block's scale is divided by 2^margin. */
  readonly margin: number;
}

export function quantizeFp8BlockwiseAttrs(rows: number, cols: number, format: Fp8Format, block: Fp8Block, transpose = false, margin = 0): QuantizeFp8BlockwiseAttrs {
  return { rows, cols, format, transpose, block, margin };
}
const qa = quantizeFp8BlockwiseAttrs;

/** out's shape: [rows, cols], or [cols, rows] transposed. */
export function blockwiseOutShape({ rows, cols, transpose }: QuantizeFp8BlockwiseAttrs): [number, number] {
  return transpose ? [cols, rows] : [rows, cols];
}

/** The reference on host arrays: writes out (the fp8 values as numbers) and scaleInv (padding included). */
export function quantizeFp8BlockwiseReference(x: ArrayLike<number>, out: Float64Array, scaleInv: Float64Array, a: QuantizeFp8BlockwiseAttrs): void {
  const { cols, format, transpose, block, margin } = a;
  const [R, C] = blockwiseOutShape(a);
  const value = (r: number, c: number): number => (transpose ? x[c * cols + r]! : x[r * cols + c]!);
  const height = block === '1x128' ? 1 : FP8_BLOCK_LEN;
  scaleInv.fill(0);
  for (let r0 = 0; r0 < R; r0 += height) {
    const r1 = Math.min(R, r0 + height);
    for (let c0 = 0; c0 < C; c0 += FP8_BLOCK_LEN) {
      const c1 = Math.min(C, c0 + FP8_BLOCK_LEN);
      let amax = 0;
      for (let r = r0; r < r1; r++) {
        for (let c = c0; c < c1; c++) {
          const v = Math.abs(value(r, c));
          if (v > amax) amax = v;
        }
      }
      const scale = pow2Scale(Math.fround(amax), format, margin, 1);
      scaleInv[blockScaleIndex(r0, c0, R, C, block)] = inversePow2(scale);
      for (let r = r0; r < r1; r++) {
        for (let c = c0; c < c1; c++) out[r * C + c] = quantizeValue(value(r, c), scale, format);
      }
    }
  }
}

export const quantizeFp8Blockwise = defineOp<QuantizeFp8BlockwiseAttrs>({
  name: 'quantize_fp8_blockwise',
  summary: 'out = fp8(x · scale) with a power-of-two scale per 1x128 or 128x128 block of out (x or xᵀ) from the block\'s amax; scaleInv the factors in cuBLASLt\'s block-scaled layout',
  args: [
    { name: 'x', role: 'in', dtype: 'float' },
    { name: 'out', role: 'out', dtype: 'fp8e4m3' },
    { name: 'scaleInv', role: 'out', dtype: 'f32' },
  ],
  floatDtypes: ['f32', 'bf16'],
  validate(attrs) {
    requireDims('quantize_fp8_blockwise', attrs, ['rows', 'cols']);
    requireFlags('quantize_fp8_blockwise', attrs, ['transpose']);
    requireFormat('quantize_fp8_blockwise', 'format', attrs.format);
    requireBlock('quantize_fp8_blockwise', 'block', attrs.block);
    if (!Number.isInteger(attrs.margin) || attrs.margin < 0 || attrs.margin > 32) badAttr('quantize_fp8_blockwise', 'margin', attrs.margin, 'expected an integer in [0, 32]');
  },
  shapes: (attrs) => {
    const out = blockwiseOutShape(attrs);
    return { x: [attrs.rows, attrs.cols], out, scaleInv: blockScaleShape(out[0], out[1], attrs.block) };
  },
  argDtype: (arg, { format }) => (arg === 'out' ? FP8_FORMAT[format].dtype : undefined),
  reference({ x, out, scaleInv }, attrs) {
    quantizeFp8BlockwiseReference(x!, out as Float64Array, scaleInv as Float64Array, attrs);
  },
  // Both block shapes, layouts and formats; partial blocks at the edges (sizes off 128 and off
  // the multiples of 4 the scale rows are padded to) and whole ones; a margin. bench: a llama-1.3b
  // activation (rows and the transposed copy wgrad takes) and a weight.
  cases: (scale) =>
    scale === 'test'
      ? [
          { label: '1x128 e4m3 200x300', attrs: qa(200, 300, 'e4m3', '1x128') },
          { label: '1x128 e4m3 200x300 transposed', attrs: qa(200, 300, 'e4m3', '1x128', true) },
          { label: '1x128 e5m2 37x45 margin 1', attrs: qa(37, 45, 'e5m2', '1x128', false, 1) },
          { label: '1x128 e5m2 256x256 transposed', attrs: qa(256, 256, 'e5m2', '1x128', true) },
          { label: '128x128 e4m3 300x203', attrs: qa(300, 203, 'e4m3', '128x128') },
          { label: '128x128 e4m3 300x203 transposed', attrs: qa(300, 203, 'e4m3', '128x128', true) },
          { label: '128x128 e5m2 256x384 margin 2', attrs: qa(256, 384, 'e5m2', '128x128', false, 2) },
        ]
      : [
          { label: '1x128 e4m3 16384x2048', attrs: qa(16384, 2048, 'e4m3', '1x128') },
          { label: '1x128 e4m3 16384x2048 transposed', attrs: qa(16384, 2048, 'e4m3', '1x128', true) },
          { label: '128x128 e4m3 5504x2048', attrs: qa(5504, 2048, 'e4m3', '128x128') },
          { label: '128x128 e4m3 5504x2048 transposed', attrs: qa(5504, 2048, 'e4m3', '128x128', true) },
        ],
  sample(rng, { rows, cols }) {
    const n = numel([rows, cols]);
    // Magnitudes over many binades (values land on subnormals), and x's first 128 x 128 corner
    // zero where that leaves other values: zero blocks in every block shape and layout.
    const x = randn(rng, n);
    for (let i = 0; i < n; i++) x[i] = Math.fround(x[i]! * 2 ** (Math.floor(rng.uniform() * 16) - 8));
    const zr = Math.min(rows, FP8_BLOCK_LEN), zc = Math.min(cols, FP8_BLOCK_LEN);
    if (zr * zc < n) {
      for (let r = 0; r < zr; r++) x.fill(0, r * cols, r * cols + zc);
    }
    return { x };
  },
  // Power-of-two scales make every step exact: every backend gives the same bits.
  tolerance: { f32: 0, fp8e4m3: 0, fp8e5m2: 0 },
});
