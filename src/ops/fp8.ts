/**
 * FP8 scaling, the one definition every backend is held to bit for bit. A tensor quantised to FP8
 * is stored as q = fp8(x · scale) (round to nearest even, saturating to the format's largest
 * finite value) with a per-tensor scale; a GEMM reads q · scaleInv. Scales are powers of two, so
 * x · scale and q · scaleInv are exact in f32 and every backend computes the same bits with
 * integer arithmetic on the f32 exponent, no division or logarithm (whose accuracy WGSL leaves
 * open).
 *
 * Each quantised tensor (a site: one layer's input, weight or output gradient) keeps a meta
 * record of f32 values [amax history (historyLen), scale, scaleInv]; history[0] is the current
 * step's amax. The scaling recipes:
 * - delayed: quantise with the scale the last update left; record the amax; at the end of each
 *   optimizer step fp8_scale_update sets the scale from the history's maximum and rolls it
 *   (Transformer Engine's delayed scaling, amax_compute_algo "max");
 * - current: the scale comes from this tensor's own amax, computed before it is quantised.
 */
import { bitsF32, f32Bits, roundTo } from '../convert.js';
import type { DType } from '../tensor.js';
import { badAttr } from './op.js';

export const FP8_FORMATS = ['e4m3', 'e5m2'] as const;
export type Fp8Format = (typeof FP8_FORMATS)[number];

export const FP8_SCALINGS = ['delayed', 'current'] as const;
export type Fp8Scaling = (typeof FP8_SCALINGS)[number];

interface FormatInfo {
  readonly dtype: 'fp8e4m3' | 'fp8e5m2';
  /** The largest finite value: 1.75 · 2^maxExp. */
  readonly max: number;
  readonly maxExp: number;
}

export const FP8_FORMAT: Readonly<Record<Fp8Format, FormatInfo>> = {
  e4m3: { dtype: 'fp8e4m3', max: 448, maxExp: 8 },
  e5m2: { dtype: 'fp8e5m2', max: 57344, maxExp: 15 },
};

export function fp8Dtype(format: Fp8Format): DType {
  return FP8_FORMAT[format].dtype;
}

/** Scale exponents stay within [-MAX_SCALE_EXP, MAX_SCALE_EXP]: scale and scaleInv both normal f32. */
export const MAX_SCALE_EXP = 126;

/** Offsets within one site's meta record of `historyLen + 2` f32 values. */
export function metaLength(historyLen: number): number {
  return historyLen + 2;
}

/**
 * The largest power of two s with amax · s ≤ the format's max, divided by 2^margin; `previous`
 * when amax is zero or not finite (nothing to go by). Exact: with amax = m · 2^E (1 ≤ m < 2) and
 * max = 1.75 · 2^maxExp, s = 2^(maxExp − E), halved when m > 1.75. An amax below the f32 normals
 * takes the largest scale.
 */
export function pow2Scale(amax: number, format: Fp8Format, margin: number, previous: number): number {
  const bits = f32Bits(amax);
  const exp = (bits >>> 23) & 0xff;
  if (!(amax > 0) || exp === 0xff) return previous;
  let k: number;
  if (exp === 0) k = MAX_SCALE_EXP;
  else k = FP8_FORMAT[format].maxExp - (exp - 127) - ((bits & 0x7fffff) > 0x600000 ? 1 : 0) - margin;
  k = Math.max(-MAX_SCALE_EXP, Math.min(MAX_SCALE_EXP, k));
  return bitsF32((k + 127) << 23);
}

/** 1 / scale for a power-of-two scale (exact). */
export function inversePow2(scale: number): number {
  const k = ((f32Bits(scale) >>> 23) & 0xff) - 127;
  return bitsF32((127 - k) << 23);
}

/** fp8(x · scale) as the value it stands for: the product (exact) clamped to ±max, rounded to nearest even. NaN stays NaN. */
export function quantizeValue(x: number, scale: number, format: Fp8Format): number {
  const { dtype, max } = FP8_FORMAT[format];
  const y = Math.fround(x * scale);
  return roundTo(dtype, y > max ? max : y < -max ? -max : y);
}

/** The largest |x| over the values, NaN ignored (an infinity counts). */
export function absMax(x: ArrayLike<number>): number {
  let m = 0;
  for (let i = 0; i < x.length; i++) {
    const a = Math.abs(x[i]!);
    if (a > m) m = a;
  }
  return m;
}

export function requireFormat(op: string, key: string, v: unknown): void {
  if (!FP8_FORMATS.includes(v as Fp8Format)) badAttr(op, key, v, `expected one of ${FP8_FORMATS.join(', ')}`);
}
