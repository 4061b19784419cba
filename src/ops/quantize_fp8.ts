/**
 * quantize_fp8: fp8(x · scale), per tensor, as src/ops/fp8.ts defines it, in x's layout (out
 * [rows, cols]), transposed (outT [cols, rows], the layout an FP8 GEMM's other operand order needs:
 * FP8 tensor cores take both operands with the summed dimension contiguous), or both from one read
 * of x (a tensor a layer's GEMMs need both ways: an output gradient, a weight). The site's meta
 * record [amax history, scale, scaleInv] says which scale: with `current` scaling the op sets scale
 * and scaleInv from this tensor's amax first; with `delayed` it uses the scale there. Either way it
 * raises history[0] to this tensor's amax once (a site quantised several times in a step,
 * micro-batches, keeps the largest).
 */
import { numel } from '../tensor.js';
import { FP8_FORMAT, FP8_SCALINGS, type Fp8Format, type Fp8Scaling, absMax, inversePow2, metaLength, pow2Scale, quantizeValue, requireFormat } from './fp8.js';
import { badAttr, defineOp, randn, requireDims } from './op.js';

/** Which layouts quantize_fp8 writes: x's ('rows', into out), its transpose ('cols', into outT), or both. */
export const FP8_LAYOUTS = ['rows', 'cols', 'both'] as const;
export type Fp8Layout = (typeof FP8_LAYOUTS)[number];

export interface QuantizeFp8Attrs {
  readonly rows: number;
  readonly cols: number;
  readonly format: Fp8Format;
  readonly layout: Fp8Layout;
  readonly scaling: Fp8Scaling;
  /** Length of the meta record's amax history (meta holds historyLen + 2 values). */
  readonly historyLen: number;
  /** current scaling: the scale is divided by 2^margin. */
  readonly margin: number;
}

export function quantizeFp8Attrs(rows: number, cols: number, format: Fp8Format, scaling: Fp8Scaling, historyLen: number, margin: number, layout: Fp8Layout = 'rows'): QuantizeFp8Attrs {
  return { rows, cols, format, layout, scaling, historyLen, margin };
}
const qa = quantizeFp8Attrs;

/**
 * The reference on host arrays, shared with the emulated paths: updates meta (in place) and
 * writes out and outT as the layout says (the fp8 values as numbers).
 */
export function quantizeFp8Reference(x: ArrayLike<number>, meta: Float64Array | Float32Array, out: Float64Array, outT: Float64Array, a: QuantizeFp8Attrs): void {
  const { rows, cols, format, layout, scaling, historyLen, margin } = a;
  const amax = Math.fround(absMax(x));
  if (scaling === 'current') {
    meta[historyLen] = pow2Scale(amax, format, margin, meta[historyLen]!);
    meta[historyLen + 1] = inversePow2(meta[historyLen]!);
  }
  if (amax > meta[0]! || Number.isNaN(meta[0]!)) meta[0] = amax;
  const scale = meta[historyLen]!;
  const plain = layout !== 'cols', transposed = layout !== 'rows';
  for (let r = 0; r < rows; r++) {
    for (let c = 0; c < cols; c++) {
      const q = quantizeValue(x[r * cols + c]!, scale, format);
      if (plain) out[r * cols + c] = q;
      if (transposed) outT[c * rows + r] = q;
    }
  }
}

export const quantizeFp8 = defineOp<QuantizeFp8Attrs>({
  name: 'quantize_fp8',
  summary: 'out = fp8(x · scale) and/or outT = fp8(xᵀ · scale) (round to nearest even, saturating), from one read of x; the scale from meta (delayed) or from amax(x) (current); meta history[0] = max(history[0], amax(x))',
  // out keeps x's layout and outT is the transpose in every layout, so that a view means one
  // thing whatever a call asks for; every argument is declared, so the one a layout does not
  // write is an empty tensor ([0]), which no backend reads or writes.
  args: [
    { name: 'x', role: 'in', dtype: 'float' },
    { name: 'meta', role: 'inout', dtype: 'f32' },
    { name: 'out', role: 'out', dtype: 'fp8e4m3' },
    { name: 'outT', role: 'out', dtype: 'fp8e4m3' },
  ],
  floatDtypes: ['f32', 'bf16'],
  validate(attrs) {
    requireDims('quantize_fp8', attrs, ['rows', 'cols', 'historyLen']);
    requireFormat('quantize_fp8', 'format', attrs.format);
    if (!FP8_LAYOUTS.includes(attrs.layout)) badAttr('quantize_fp8', 'layout', attrs.layout, `expected one of ${FP8_LAYOUTS.join(', ')}`);
    if (!FP8_SCALINGS.includes(attrs.scaling)) badAttr('quantize_fp8', 'scaling', attrs.scaling, `expected one of ${FP8_SCALINGS.join(', ')}`);
    if (!Number.isInteger(attrs.margin) || attrs.margin < 0 || attrs.margin > 32) badAttr('quantize_fp8', 'margin', attrs.margin, 'expected an integer in [0, 32]');
  },
  shapes: ({ rows, cols, layout, historyLen }) => ({
    x: [rows, cols],
    meta: [metaLength(historyLen)],
    out: layout === 'cols' ? [0] : [rows, cols],
    outT: layout === 'rows' ? [0] : [cols, rows],
  }),
  argDtype: (arg, { format }) => (arg === 'out' || arg === 'outT' ? FP8_FORMAT[format].dtype : undefined),
  reference({ x, meta, out, outT }, attrs) {
    quantizeFp8Reference(x!, meta as Float64Array, out as Float64Array, outT as Float64Array, attrs);
  },
  // Odd sizes, every layout, both formats and recipes, a margin; 'both' ragged and in whole
  // tiles. Bench: a llama-1.3b activation or output gradient.
  cases: (scale) =>
    scale === 'test'
      ? [
          { label: 'e4m3 current 37x45', attrs: qa(37, 45, 'e4m3', 'current', 1, 0) },
          { label: 'e4m3 current 37x45 cols', attrs: qa(37, 45, 'e4m3', 'current', 1, 0, 'cols') },
          { label: 'e5m2 delayed 64x130 history 4', attrs: qa(64, 130, 'e5m2', 'delayed', 4, 0) },
          { label: 'e5m2 delayed 130x64 history 16 cols', attrs: qa(130, 64, 'e5m2', 'delayed', 16, 0, 'cols') },
          { label: 'e4m3 delayed 3x5 (saturating)', attrs: qa(3, 5, 'e4m3', 'delayed', 2, 0) },
          { label: 'e4m3 current margin 2 256x256 cols', attrs: qa(256, 256, 'e4m3', 'current', 1, 2, 'cols') },
          { label: 'e4m3 current margin 1 37x45 both', attrs: qa(37, 45, 'e4m3', 'current', 1, 1, 'both') },
          { label: 'e5m2 delayed 256x192 history 4 both', attrs: qa(256, 192, 'e5m2', 'delayed', 4, 0, 'both') },
        ]
      : [
          { label: 'e4m3 current 16384x2048', attrs: qa(16384, 2048, 'e4m3', 'current', 1, 0) },
          { label: 'e4m3 current 16384x2048 cols', attrs: qa(16384, 2048, 'e4m3', 'current', 1, 0, 'cols') },
          { label: 'e5m2 delayed 16384x2048 cols', attrs: qa(16384, 2048, 'e5m2', 'delayed', 16, 0, 'cols') },
          { label: 'e5m2 delayed 16384x2048 both', attrs: qa(16384, 2048, 'e5m2', 'delayed', 16, 0, 'both') },
        ],
  sample(rng, { rows, cols, historyLen, scaling }) {
    const n = numel([rows, cols]);
    // Magnitudes over many binades, so that values land on subnormals and saturate; an exact
    // power of two as the delayed scale (small: some values overflow the format and saturate).
    const x = randn(rng, n);
    for (let i = 0; i < n; i++) x[i] = Math.fround(x[i]! * 2 ** (Math.floor(rng.uniform() * 16) - 8));
    const meta = new Float64Array(metaLength(historyLen));
    for (let i = 0; i < historyLen; i++) meta[i] = Math.fround(rng.uniform() * 300);
    const k = scaling === 'delayed' ? 2 + Math.floor(rng.uniform() * 4) : 0;
    meta[historyLen] = 2 ** k;
    meta[historyLen + 1] = 2 ** -k;
    return { x, meta };
  },
  // Power-of-two scales make every step exact: every backend gives the same bits.
  tolerance: { f32: 0, fp8e4m3: 0, fp8e5m2: 0 },
});
