/**
 * cast: convert a flat tensor between float dtypes, rounding to nearest even exactly as
 * src/convert.ts does (the conversions every backend is held to bit for bit).
 */
import { bitsF32, f32Bits, roundTo } from '../convert.js';
import type { FloatDType } from '../tensor.js';
import { badAttr, defineOp, requireDims } from './op.js';

export const CAST_DTYPES: readonly FloatDType[] = ['f32', 'f16', 'bf16', 'fp8e4m3', 'fp8e5m2'];

export interface CastAttrs {
  readonly n: number;
  readonly from: FloatDType;
  readonly to: FloatDType;
}

/** Low f32 bits that make a value exactly halfway between two neighbours of the target format. */
const TIE_BITS = { f16: 0x1000, bf16: 0x8000 } as const;

export const cast = defineOp<CastAttrs>({
  name: 'cast',
  summary: 'out = x converted from one float dtype to another (round to nearest even)',
  // The declared dtypes are placeholders: argDtype gives each arg's dtype from the attributes
  // (not 'float', which would require x and out to share one float dtype).
  args: [
    { name: 'x', role: 'in', dtype: 'f32' },
    { name: 'out', role: 'out', dtype: 'f32' },
  ],
  validate(attrs) {
    requireDims('cast', attrs, ['n']);
    for (const key of ['from', 'to'] as const) {
      if (!CAST_DTYPES.includes(attrs[key])) badAttr('cast', key, attrs[key], `expected one of ${CAST_DTYPES.join(', ')}`);
    }
  },
  shapes: ({ n }) => ({ x: [n], out: [n] }),
  argDtype: (arg, { from, to }) => (arg === 'x' ? from : to),
  reference({ x, out }, { to }) {
    for (let i = 0; i < out!.length; i++) out![i] = roundTo(to, x![i]!);
  },
  cases: (s) => {
    const pairs: [FloatDType, FloatDType, number][] =
      s === 'test'
        ? [
            ['f32', 'f16', 1001], ['f32', 'bf16', 1002], ['f16', 'f32', 999], ['bf16', 'f32', 7], ['f16', 'bf16', 1001], ['bf16', 'f16', 1], ['f32', 'f32', 5], ['bf16', 'bf16', 3],
            ['f32', 'fp8e4m3', 1001], ['f32', 'fp8e5m2', 1003], ['fp8e4m3', 'f32', 998], ['bf16', 'fp8e5m2', 1000], ['fp8e5m2', 'bf16', 1002],
          ]
        : [['f32', 'bf16', 1 << 24], ['bf16', 'f32', 1 << 24], ['f32', 'f16', 1 << 24]];
    return pairs.map(([from, to, n]) => ({ label: `${from}->${to} n=${n}`, attrs: { n, from, to } }));
  },
  sample(rng, { n }) {
    // Magnitudes from f16 subnormals (2^-28) to 2^13 (under f16's max), and exact ties for each
    // 16-bit format in every fourth element, so rounding of every kind is exercised.
    const x = new Float64Array(n);
    for (let i = 0; i < n; i++) {
      const v = Math.fround(rng.normal() * 2 ** (Math.floor(rng.uniform() * 42) - 28)) || 1;
      const tie = i % 4 === 1 ? TIE_BITS.bf16 : i % 4 === 2 ? TIE_BITS.f16 : 0;
      x[i] = tie ? bitsF32((f32Bits(v) & ~(2 * tie - 1)) | tie) : v;
    }
    return { x };
  },
  tolerance: { f32: 0, f16: 0, bf16: 0, fp8e4m3: 0, fp8e5m2: 0 },
});
