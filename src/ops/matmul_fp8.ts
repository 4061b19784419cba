/**
 * matmul_fp8: out (+)= (a · aScaleInv) · (b · bScaleInv)ᵀ with a [m, k] and b [n, k] in FP8 (E4M3
 * or E5M2, not both E5M2) and the dequantisation factors on the device; both operands have the
 * summed dimension contiguous, the one layout FP8 tensor cores take. Each operand's factors are
 * per tensor (aBlocks / bBlocks 'tensor': one value, a site's scaleInv, src/ops/fp8.ts) or per
 * block along k ('1x128', '128x128': quantize_fp8_blockwise's scaleInv, in the layout its
 * declaration gives, which cuBLASLt's block-scaled FP8 GEMM reads). out is in the compute dtype
 * or, with outF32, f32 (a weight gradient accumulated into the f32 master gradient).
 * matmul_fp8_add writes residual + the product (a decoder block's output projections). The
 * reference is the float64 product of the dequantised inputs.
 */
import { numel } from '../tensor.js';
import { FP8_FORMAT, type Fp8Format, quantizeValue, requireFormat } from './fp8.js';
import { productNT } from './matmul.js';
import { FP8_BLOCK_LEN, type Fp8Block, blockScaleIndex, blockScaleShape, quantizeFp8BlockwiseAttrs, quantizeFp8BlockwiseReference, requireBlock } from './quantize_fp8_blockwise.js';
import { BF16_ROUNDED_OUTPUT, type RefArray, badAttr, defineOp, randn, requireDims, requireFlags } from './op.js';

/**
 * Products of FP8 values times powers of two are exact in f32, and an f32 sum in k order (the CPU,
 * WGSL and the CUDA fallback) stays within 2e-5 to k = 16384. Hopper's FP8 tensor cores add their
 * products in a narrower fixed-point accumulator before each promotion to f32, which leaves
 * relative errors near 1e-4 at every k: the f32 tolerance covers that. A bf16 out adds one rounding.
 */
const FP8_GEMM_TOLERANCE = { f32: 5e-4, bf16: BF16_ROUNDED_OUTPUT };

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
  /** What a's factors scale: the whole tensor (aScaleInv [1]) or each block along k. */
  readonly aBlocks: Fp8Blocks;
  readonly bBlocks: Fp8Blocks;
}

/** An operand's scaling: per tensor or per block (quantize_fp8_blockwise's shapes). */
export type Fp8Blocks = 'tensor' | Fp8Block;

export type MatmulFp8AddAttrs = Omit<MatmulFp8Attrs, 'accumulate' | 'outF32'>;

export function matmulFp8Attrs(m: number, n: number, k: number, aFormat: Fp8Format, bFormat: Fp8Format, extra: Partial<Pick<MatmulFp8Attrs, 'accumulate' | 'outF32' | 'aBlocks' | 'bBlocks'>> = {}): MatmulFp8Attrs {
  return { m, n, k, aFormat, bFormat, accumulate: false, outF32: false, aBlocks: 'tensor', bBlocks: 'tensor', ...extra };
}

/** The shape of an operand [rows, k]'s factors. */
export function fp8ScaleShape(rows: number, k: number, blocks: Fp8Blocks): number[] {
  return blocks === 'tensor' ? [1] : blockScaleShape(rows, k, blocks);
}

function validateFp8(op: string, attrs: MatmulFp8AddAttrs): void {
  requireDims(op, attrs, ['m', 'n', 'k']);
  requireFormat(op, 'aFormat', attrs.aFormat);
  requireFormat(op, 'bFormat', attrs.bFormat);
  requireBlock(op, 'aBlocks', attrs.aBlocks, ['tensor']);
  requireBlock(op, 'bBlocks', attrs.bBlocks, ['tensor']);
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

function fp8Shapes({ m, n, k, aBlocks, bBlocks }: MatmulFp8AddAttrs) {
  return { a: [m, k], b: [n, k], aScaleInv: fp8ScaleShape(m, k, aBlocks), bScaleInv: fp8ScaleShape(n, k, bBlocks), out: [m, n] };
}

/**
 * An operand's values times their blocks' factors (exact in float64), and the factor left to
 * apply to the product: a per-tensor operand stays as it is, its one factor applied after the sum.
 */
function dequantized(x: RefArray, scaleInv: RefArray, rows: number, k: number, blocks: Fp8Blocks): { values: RefArray; factor: number } {
  if (blocks === 'tensor') return { values: x, factor: scaleInv[0]! };
  const values = new Float64Array(rows * k);
  for (let r = 0; r < rows; r++) {
    for (let l = 0; l < k; l++) values[r * k + l] = x[r * k + l]! * scaleInv[blockScaleIndex(r, l, rows, k, blocks)]!;
  }
  return { values, factor: 1 };
}

/** out = addend + (a · aScaleInv)(b · bScaleInv)ᵀ in float64 (no addend: the product alone); addend may be out. */
function fp8Reference(args: { a: RefArray; b: RefArray; aScaleInv: RefArray; bScaleInv: RefArray }, out: RefArray, addend: RefArray | null, attrs: MatmulFp8AddAttrs): void {
  const { m, n, k, aBlocks, bBlocks } = attrs;
  const a = dequantized(args.a, args.aScaleInv, m, k, aBlocks), b = dequantized(args.b, args.bScaleInv, n, k, bBlocks);
  const product = productNT(a.values, 0, b.values, 0, m, n, k);
  const s = a.factor * b.factor;
  for (let i = 0; i < m * n; i++) out[i] = (addend ? addend[i]! : 0) + product[i]! * s;
}

/**
 * fp8 operands: per tensor, normals (some large enough to saturate at the scale given) quantised
 * with a power-of-two scale; per block, normals of a magnitude that varies from row to row (2^-6
 * to 2^6) and from one k block to the next (2^-4 to 2^4), so that the blocks' factors differ,
 * quantised by quantize_fp8_blockwise's reference.
 */
function sampleOperands(rng: Parameters<typeof randn>[0], attrs: MatmulFp8AddAttrs) {
  const { m, n, k, aFormat, bFormat, aBlocks, bBlocks } = attrs;
  const q = (count: number, format: Fp8Format, scale: number) => {
    const v = randn(rng, count, 4);
    for (let i = 0; i < count; i++) v[i] = quantizeValue(v[i]!, scale, format);
    return v;
  };
  const blockwise = (rows: number, format: Fp8Format, block: Fp8Block) => {
    const x = randn(rng, rows * k);
    const exponent = (range: number) => Math.floor(rng.uniform() * (2 * range + 1)) - range;
    const kBlocks = Array.from({ length: Math.ceil(k / FP8_BLOCK_LEN) }, () => exponent(4));
    for (let r = 0; r < rows; r++) {
      const e = exponent(6);
      for (let l = 0; l < k; l++) x[r * k + l] = Math.fround(x[r * k + l]! * 2 ** (e + kBlocks[Math.floor(l / FP8_BLOCK_LEN)]!));
    }
    const codes = new Float64Array(rows * k), scaleInv = new Float64Array(numel(blockScaleShape(rows, k, block)));
    quantizeFp8BlockwiseReference(x, codes, scaleInv, quantizeFp8BlockwiseAttrs(rows, k, format, block));
    return { codes, scaleInv };
  };
  const ka = 4 + Math.floor(rng.uniform() * 4), kb = Math.floor(rng.uniform() * 4) - 2;
  const operand = (rows: number, format: Fp8Format, blocks: Fp8Blocks, e: number) => {
    if (blocks !== 'tensor') return blockwise(rows, format, blocks);
    return { codes: q(rows * k, format, 2 ** e), scaleInv: Float64Array.of(2 ** -e) };
  };
  const a = operand(m, aFormat, aBlocks, ka), b = operand(n, bFormat, bBlocks, kb);
  return { a: a.codes, b: b.codes, aScaleInv: a.scaleInv, bScaleInv: b.scaleInv };
}

const fm = matmulFp8Attrs;
const blocks = (aBlocks: Fp8Blocks, bBlocks: Fp8Blocks) => ({ aBlocks, bBlocks });

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
    fp8Reference({ a: a!, b: b!, aScaleInv: aScaleInv!, bScaleInv: bScaleInv! }, out!, attrs.accumulate ? out! : null, attrs);
  },
  // Sizes off the 16-byte alignment FP8 GEMMs want where the backends allow it, both formats
  // each side, the weight-gradient form; per-block factors in every combination, with k off the
  // 128 of a block (partial last blocks) and on it (the shapes cuBLASLt's block-scaled GEMM
  // takes): 1x128 · 128x128 (forward and dgrad: activations or gradients against a weight),
  // 128x128 · 1x128 (the weight first), 1x128 · 1x128 (wgrad), and the ones only the fallbacks
  // run (128x128 · 128x128, a per-tensor operand against a blocked one). bench: llama-1.3b's
  // linear layers at 8 x 2048 tokens, per tensor and per block.
  cases: (scale) =>
    scale === 'test'
      ? [
          { label: 'e4m3·e4m3 64x48x32', attrs: fm(64, 48, 32, 'e4m3', 'e4m3') },
          { label: 'e5m2·e4m3 96x80x64 (dgrad)', attrs: fm(96, 80, 64, 'e5m2', 'e4m3') },
          { label: 'e4m3·e5m2 48x64x128 f32 out', attrs: fm(48, 64, 128, 'e4m3', 'e5m2', { outF32: true }) },
          { label: 'f32 out += e5m2·e4m3 80x48x256 (wgrad)', attrs: fm(80, 48, 256, 'e5m2', 'e4m3', { accumulate: true, outF32: true }) },
          { label: 'out += e4m3·e4m3 32x32x16', attrs: fm(32, 32, 16, 'e4m3', 'e4m3', { accumulate: true }) },
          { label: '1x128·128x128 e4m3 200x160x300', attrs: fm(200, 160, 300, 'e4m3', 'e4m3', blocks('1x128', '128x128')) },
          { label: '1x128·128x128 e5m2·e4m3 144x256x384 (dgrad)', attrs: fm(144, 256, 384, 'e5m2', 'e4m3', blocks('1x128', '128x128')) },
          { label: '128x128·1x128 e4m3 256x136x256 f32 out', attrs: fm(256, 136, 256, 'e4m3', 'e4m3', { ...blocks('128x128', '1x128'), outF32: true }) },
          { label: 'f32 out += 1x128·1x128 e5m2·e4m3 96x144x272 (wgrad)', attrs: fm(96, 144, 272, 'e5m2', 'e4m3', { ...blocks('1x128', '1x128'), accumulate: true, outF32: true }) },
          { label: 'f32 out += 1x128·1x128 e5m2·e4m3 128x256x512 (wgrad)', attrs: fm(128, 256, 512, 'e5m2', 'e4m3', { ...blocks('1x128', '1x128'), accumulate: true, outF32: true }) },
          { label: '128x128·128x128 e4m3 130x140x150', attrs: fm(130, 140, 150, 'e4m3', 'e4m3', blocks('128x128', '128x128')) },
          { label: 'tensor·1x128 e4m3 64x72x200', attrs: fm(64, 72, 200, 'e4m3', 'e4m3', blocks('tensor', '1x128')) },
        ]
      : [
          { label: 'qkv x·Wᵀ 16384x6144x2048', attrs: fm(16384, 6144, 2048, 'e4m3', 'e4m3') },
          { label: 'gate/up Wᵀ·x 11008x16384x2048', attrs: fm(11008, 16384, 2048, 'e4m3', 'e4m3') },
          { label: 'dgrad dy·W 16384x2048x5504', attrs: fm(16384, 2048, 5504, 'e5m2', 'e4m3') },
          { label: 'wgrad dW += dyᵀ·x 2048x5504x16384 f32', attrs: fm(2048, 5504, 16384, 'e5m2', 'e4m3', { accumulate: true, outF32: true }) },
          { label: 'qkv x·Wᵀ 1x128·128x128 16384x6144x2048', attrs: fm(16384, 6144, 2048, 'e4m3', 'e4m3', blocks('1x128', '128x128')) },
          { label: 'gate/up Wᵀ·x 128x128·1x128 11008x16384x2048', attrs: fm(11008, 16384, 2048, 'e4m3', 'e4m3', blocks('128x128', '1x128')) },
          { label: 'dgrad dy·W 1x128·128x128 16384x2048x5504', attrs: fm(16384, 2048, 5504, 'e5m2', 'e4m3', blocks('1x128', '128x128')) },
          { label: 'wgrad dW += dyᵀ·x 1x128·1x128 2048x5504x16384 f32', attrs: fm(2048, 5504, 16384, 'e5m2', 'e4m3', { ...blocks('1x128', '1x128'), accumulate: true, outF32: true }) },
        ],
  sample: (rng, attrs) => ({ ...sampleOperands(rng, attrs), out: randn(rng, attrs.m * attrs.n) }),
  tolerance: FP8_GEMM_TOLERANCE,
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
    fp8Reference({ a: a!, b: b!, aScaleInv: aScaleInv!, bScaleInv: bScaleInv! }, out!, residual!, attrs);
  },
  cases: (scale) =>
    scale === 'test'
      ? [
          { label: 'r + e4m3·e4m3 64x48x32', attrs: fm(64, 48, 32, 'e4m3', 'e4m3') },
          { label: 'r + e4m3·e4m3 80x96x160', attrs: fm(80, 96, 160, 'e4m3', 'e4m3') },
          { label: 'r + 1x128·128x128 e4m3 80x96x200', attrs: fm(80, 96, 200, 'e4m3', 'e4m3', blocks('1x128', '128x128')) },
          { label: 'r + 1x128·128x128 e4m3 160x192x384', attrs: fm(160, 192, 384, 'e4m3', 'e4m3', blocks('1x128', '128x128')) },
        ]
      : [
          { label: 'down projection r + h·Wᵀ 16384x2048x5504', attrs: fm(16384, 2048, 5504, 'e4m3', 'e4m3') },
          { label: 'down projection r + h·Wᵀ 1x128·128x128 16384x2048x5504', attrs: fm(16384, 2048, 5504, 'e4m3', 'e4m3', blocks('1x128', '128x128')) },
        ],
  sample: (rng, attrs) => ({ ...sampleOperands(rng, attrs), residual: randn(rng, numel([attrs.m, attrs.n])) }),
  tolerance: FP8_GEMM_TOLERANCE,
  flops: ({ m, n, k }) => 2 * m * n * k,
});
