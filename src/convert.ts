/**
 * Bit-exact conversions between f32 and the narrow float formats (round to nearest even), the
 * single definition every backend is checked against. fp8 follows the OCP 8-bit spec: E4M3
 * saturates to ±448 and has NaN but no infinity; E5M2 is IEEE-like with infinities.
 */
import type { DType } from './tensor.js';

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

export function f32Bits(x: number): number {
  f32[0] = x;
  return u32[0]!;
}

export function bitsF32(b: number): number {
  u32[0] = b >>> 0;
  return f32[0]!;
}

export function f32ToBf16(x: number): number {
  const b = f32Bits(x);
  if ((b & 0x7f800000) === 0x7f800000 && (b & 0x7fffff) !== 0) return ((b >>> 16) | 0x40) & 0xffff; // quiet NaN
  const rounded = b + 0x7fff + ((b >>> 16) & 1);
  return (rounded >>> 16) & 0xffff;
}

export function bf16ToF32(h: number): number {
  return bitsF32((h & 0xffff) << 16);
}

/**
 * Encoder for a float format with `e` exponent and `m` mantissa bits, from an f32 value: round
 * to nearest even on the grid of the value's binade (the subnormal grid below the normals).
 * Results past maxFinite overflow to infinity, or clamp to ±maxFinite in saturating formats
 * (E4M3, whose all-ones pattern is NaN).
 */
function encodeMini(x: number, e: number, m: number, saturate: boolean, maxFinite: number): number {
  const signBit = 1 << (e + m);
  const infinity = ((1 << e) - 1) << m;
  if (Number.isNaN(x)) return saturate ? signBit - 1 : infinity | (1 << (m - 1));
  const sign = x < 0 || Object.is(x, -0) ? signBit : 0;
  const bias = (1 << (e - 1)) - 1;
  const code = magnitudeCode(Math.abs(x), m, bias);
  const top = magnitudeCode(maxFinite, m, bias);
  return sign | (code <= top ? code : saturate ? top : infinity);
}

/** The unsigned code of |x| rounded, unbounded above (Infinity for an infinite x). */
function magnitudeCode(ax: number, m: number, bias: number): number {
  // The exponent read from the f32 bits is exact; f32 subnormals fall to the clamp, far below.
  const exp = Math.max(((f32Bits(ax) >>> 23) & 0xff) - 127, 1 - bias);
  const q = roundHalfEven(ax / 2 ** (exp - m)); // an exact scaling by a power of two
  // Normals have q in [2^m, 2^(m+1)] (the top carries into the next exponent), subnormals
  // q < 2^m: both encode as ((exp + bias - 1) << m) + q.
  return ((exp + bias - 1) << m) + q;
}

function roundHalfEven(q: number): number {
  const fl = Math.floor(q);
  const frac = q - fl;
  return frac > 0.5 || (frac === 0.5 && fl % 2 === 1) ? fl + 1 : fl;
}

function decodeMini(b: number, e: number, m: number, e4m3: boolean): number {
  const sign = b & (1 << (e + m)) ? -1 : 1;
  const expMax = (1 << e) - 1;
  const bias = (1 << (e - 1)) - 1;
  const ex = (b >>> m) & expMax;
  const mant = b & ((1 << m) - 1);
  if (e4m3) {
    if (ex === expMax && mant === (1 << m) - 1) return NaN;
  } else if (ex === expMax) {
    return mant === 0 ? sign * Infinity : NaN;
  }
  if (ex === 0) return sign * mant * 2 ** (1 - bias - m);
  return sign * (1 + mant / (1 << m)) * 2 ** (ex - bias);
}

export function f32ToF16(x: number): number {
  return encodeMini(Math.fround(x), 5, 10, false, 65504);
}
export function f16ToF32(h: number): number {
  return decodeMini(h & 0xffff, 5, 10, false);
}
export function f32ToE4m3(x: number): number {
  return encodeMini(Math.fround(x), 4, 3, true, 448);
}
export function e4m3ToF32(b: number): number {
  return decodeMini(b & 0xff, 4, 3, true);
}
export function f32ToE5m2(x: number): number {
  return encodeMini(Math.fround(x), 5, 2, false, 57344);
}
export function e5m2ToF32(b: number): number {
  return decodeMini(b & 0xff, 5, 2, false);
}

/** Round a float to the nearest value representable in `dtype` (f32 for integer dtypes' floats). */
export function roundTo(dtype: DType, x: number): number {
  switch (dtype) {
    case 'bf16': return bf16ToF32(f32ToBf16(x));
    case 'f16': return f16ToF32(f32ToF16(x));
    case 'fp8e4m3': return e4m3ToF32(f32ToE4m3(x));
    case 'fp8e5m2': return e5m2ToF32(f32ToE5m2(x));
    default: return Math.fround(x);
  }
}

/** Encode floats into raw narrow-format words (Uint16Array for 16-bit, Uint8Array for fp8). */
export function encodeFloats(dtype: 'f16' | 'bf16' | 'fp8e4m3' | 'fp8e5m2', src: ArrayLike<number>): Uint16Array | Uint8Array {
  const n = src.length;
  if (dtype === 'f16' || dtype === 'bf16') {
    const out = new Uint16Array(n);
    const enc = dtype === 'f16' ? f32ToF16 : f32ToBf16;
    for (let i = 0; i < n; i++) out[i] = enc(src[i]!);
    return out;
  }
  const out = new Uint8Array(n);
  const enc = dtype === 'fp8e4m3' ? f32ToE4m3 : f32ToE5m2;
  for (let i = 0; i < n; i++) out[i] = enc(src[i]!);
  return out;
}

export function decodeFloats(dtype: 'f16' | 'bf16' | 'fp8e4m3' | 'fp8e5m2', src: Uint16Array | Uint8Array, out = new Float32Array(src.length)): Float32Array {
  const dec = dtype === 'f16' ? f16ToF32 : dtype === 'bf16' ? bf16ToF32 : dtype === 'fp8e4m3' ? e4m3ToF32 : e5m2ToF32;
  for (let i = 0; i < src.length; i++) out[i] = dec(src[i]!);
  return out;
}
