/**
 * matmul_fp8: out (+)= (a · aScaleInv) · (b · bScaleInv)ᵀ with a [m, k] and b [n, k] in FP8 (E4M3
 * or E5M2, not both E5M2) and the dequantisation factors (the sites' scaleInv, src/ops/fp8.ts) on
 * the device; both operands have the summed dimension contiguous, the one layout FP8 tensor cores
 * take. out is in the compute dtype or, with outF32, f32 (a weight gradient accumulated into the
 * f32 master gradient). matmul_fp8_add writes residual + the product (a decoder block's output
 * projections). The reference is the float64 product of the dequantised inputs.
 */
import { numel } from '../tensor.js';
import { FP8_FORMAT, type Fp8Format, quantizeValue, requireFormat } from './fp8.js';
import { productNT } from './matmul.js';
import { BF16_ROUNDED_OUTPUT, type RefArray, badAttr, defineOp, randn, requireDims, requireFlags } from './op.js';

export interface MatmulFp8Attrs {
  readonly m: number;
  readonly n: number;
  readonly k: number;
  readonly aFormat: Fp8Format;
  readonly bFormat: Fp8Format;
  /** out += the product instead of out = the product. */
  readonly accumulate: boolean;
  /** out is f32 whatever the compute dtype. */
  readonly outF32: boolean;
}

export type MatmulFp8AddAttrs = Omit<MatmulFp8Attrs, 'accumulate' | 'outF32'>;

export function matmulFp8Attrs(m: number, n: number, k: number, aFormat: Fp8Format, bFormat: Fp8Format, extra: Partial<Pick<MatmulFp8Attrs, 'accumulate' | 'outF32'>> = {}): MatmulFp8Attrs {
  return { m, n, k, aFormat, bFormat, accumulate: false, outF32: false, ...extra };
}

function validateFp8(op: string, attrs: MatmulFp8AddAttrs): void {
  requireDims(op, attrs, ['m', 'n', 'k']);
  requireFormat(op, 'aFormat', attrs.aFormat);
  requireFormat(op, 'bFormat', attrs.bFormat);
  if (attrs.aFormat === 'e5m2' && attrs.bFormat === 'e5m2') badAttr(op, 'bFormat', attrs.bFormat, 'one operand must be e4m3 (FP8 tensor cores take no E5M2 x E5M2 product)');
}

const operandDtype = (arg: string, { aFormat, bFormat }: MatmulFp8AddAttrs) =>
  arg === 'a' ? FP8_FORMAT[aFormat].dtype : arg === 'b' ? FP8_FORMAT[bFormat].dtype : undefined;

const fp8Args = [
  { name: 'a', role: 'in', dtype: 'fp8e4m3' },
  { name: 'b', role: 'in', dtype: 'fp8e4m3' },
  { name: 'aScaleInv', role: 'in', dtype: 'f32' },
  { name: 'bScaleInv', role: 'in', dtype: 'f32' },
] as const;

function fp8Shapes({ m, n, k }: MatmulFp8AddAttrs) {
  return { a: [m, k], b: [n, k], aScaleInv: [1], bScaleInv: [1], out: [m, n] };
}

/** out = addend + (a · sa)(b · sb)ᵀ in float64 (no addend: the product alone); addend may be out. */
function fp8Reference(a: RefArray, b: RefArray, sa: number, sb: number, out: RefArray, addend: RefArray | null, { m, n, k }: MatmulFp8AddAttrs): void {
  const product = productNT(a, 0, b, 0, m, n, k);
  const s = sa * sb;
  for (let i = 0; i < m * n; i++) out[i] = (addend ? addend[i]! : 0) + product[i]! * s;
}

/** fp8 operands: normals (some large enough to saturate at the scale given) quantised with a power-of-two scale. */
function sampleOperands(rng: Parameters<typeof randn>[0], attrs: MatmulFp8AddAttrs) {
  const { m, n, k, aFormat, bFormat } = attrs;
  const q = (count: number, format: Fp8Format, scale: number) => {
    const v = randn(rng, count, 4);
    for (let i = 0; i < count; i++) v[i] = quantizeValue(v[i]!, scale, format);
    return v;
  };
  const ka = 4 + Math.floor(rng.uniform() * 4), kb = Math.floor(rng.uniform() * 4) - 2;
  return { a: q(m * k, aFormat, 2 ** ka), b: q(n * k, bFormat, 2 ** kb), aScaleInv: Float64Array.of(2 ** -ka), bScaleInv: Float64Array.of(2 ** -kb) };
}

const fm = matmulFp8Attrs;

export const matmulFp8 = defineOp<MatmulFp8Attrs>({
  name: 'matmul_fp8',
  summary: 'out (+)= (a · aScaleInv) · (b · bScaleInv)ᵀ, a [m, k] and b [n, k] in fp8, f32 accumulation; out += with accumulate, f32 out with outF32',
  args: [...fp8Args, { name: 'out', role: 'inout', dtype: 'float' }],
  floatDtypes: ['f32', 'bf16'],
  validate(attrs) {
    validateFp8('matmul_fp8', attrs);
    requireFlags('matmul_fp8', attrs, ['accumulate', 'outF32']);
  },
  shapes: fp8Shapes,
  argDtype: (arg, attrs) => operandDtype(arg, attrs) ?? (arg === 'out' && attrs.outF32 ? 'f32' : undefined),
  reference({ a, b, aScaleInv, bScaleInv, out }, attrs) {
    fp8Reference(a!, b!, aScaleInv![0]!, bScaleInv![0]!, out!, attrs.accumulate ? out! : null, attrs);
  },
  // Sizes off the 16-byte alignment FP8 GEMMs want where the backends allow it, both formats
  // each side, the weight-gradient form; bench: llama-1.3b's linear layers at 8 x 2048 tokens.
  cases: (scale) =>
    scale === 'test'
      ? [
          { label: 'e4m3·e4m3 64x48x32', attrs: fm(64, 48, 32, 'e4m3', 'e4m3') },
          { label: 'e5m2·e4m3 96x80x64 (dgrad)', attrs: fm(96, 80, 64, 'e5m2', 'e4m3') },
          { label: 'e4m3·e5m2 48x64x128 f32 out', attrs: fm(48, 64, 128, 'e4m3', 'e5m2', { outF32: true }) },
          { label: 'f32 out += e5m2·e4m3 80x48x256 (wgrad)', attrs: fm(80, 48, 256, 'e5m2', 'e4m3', { accumulate: true, outF32: true }) },
          { label: 'out += e4m3·e4m3 32x32x16', attrs: fm(32, 32, 16, 'e4m3', 'e4m3', { accumulate: true }) },
        ]
      : [
          { label: 'qkv x·Wᵀ 16384x6144x2048', attrs: fm(16384, 6144, 2048, 'e4m3', 'e4m3') },
          { label: 'gate/up Wᵀ·x 11008x16384x2048', attrs: fm(11008, 16384, 2048, 'e4m3', 'e4m3') },
          { label: 'dgrad dy·W 16384x2048x5504', attrs: fm(16384, 2048, 5504, 'e5m2', 'e4m3') },
          { label: 'wgrad dW += dyᵀ·x 2048x5504x16384 f32', attrs: fm(2048, 5504, 16384, 'e5m2', 'e4m3', { accumulate: true, outF32: true }) },
        ],
  sample: (rng, attrs) => ({ ...sampleOperands(rng, attrs), out: randn(rng, attrs.m * attrs.n) }),
  // Products of fp8 values times powers of two are exact in f32; the f32 sum's error grows like
  // eps·sqrt(k) as matmul's (within 2e-5 to k = 16384), and a bf16 out adds one rounding.
  tolerance: { f32: 2e-5, bf16: BF16_ROUNDED_OUTPUT },
  flops: ({ m, n, k }) => 2 * m * n * k,
});

export const matmulFp8Add = defineOp<MatmulFp8AddAttrs>({
  name: 'matmul_fp8_add',
  summary: 'out = residual + (a · aScaleInv) · (b · bScaleInv)ᵀ, a [m, k] and b [n, k] in fp8, f32 accumulation, one rounding',
  args: [...fp8Args, { name: 'residual', role: 'in', dtype: 'float' }, { name: 'out', role: 'out', dtype: 'float' }],
  floatDtypes: ['f32', 'bf16'],
  validate: (attrs) => validateFp8('matmul_fp8_add', attrs),
  shapes: (attrs) => {
    const s = fp8Shapes(attrs);
    return { ...s, residual: s.out };
  },
  argDtype: operandDtype,
  reference({ a, b, aScaleInv, bScaleInv, residual, out }, attrs) {
    fp8Reference(a!, b!, aScaleInv![0]!, bScaleInv![0]!, out!, residual!, attrs);
  },
  cases: (scale) =>
    scale === 'test'
      ? [
          { label: 'r + e4m3·e4m3 64x48x32', attrs: fm(64, 48, 32, 'e4m3', 'e4m3') },
          { label: 'r + e4m3·e4m3 80x96x160', attrs: fm(80, 96, 160, 'e4m3', 'e4m3') },
        ]
      : [{ label: 'down projection r + h·Wᵀ 16384x2048x5504', attrs: fm(16384, 2048, 5504, 'e4m3', 'e4m3') }],
  sample: (rng, attrs) => ({ ...sampleOperands(rng, attrs), residual: randn(rng, numel([attrs.m, attrs.n])) }),
  tolerance: { f32: 2e-5, bf16: BF16_ROUNDED_OUTPUT },
  flops: ({ m, n, k }) => 2 * m * n * k,
});
