/** The narrow-float conversions every backend is held to: known values, ties, and round trips. */
import { describe, expect, it } from 'vitest';
import {
  bf16ToF32, bitsF32, decodeFloats, e4m3ToF32, e5m2ToF32, encodeFloats, f16ToF32, f32Bits, f32ToBf16, f32ToE4m3, f32ToE5m2, f32ToF16, roundTo,
} from '../src/convert.js';

type Case = readonly [number, number];

function expectEncodes(encode: (x: number) => number, cases: readonly Case[]): void {
  for (const [x, bits] of cases) expect(encode(x).toString(16), `encode ${x}`).toBe(bits.toString(16));
}

/** Every bit pattern of a format decodes and re-encodes to itself, except NaNs (which stay NaN). */
function expectRoundTrips(width: number, decode: (b: number) => number, encode: (x: number) => number): void {
  for (let b = 0; b < 2 ** width; b++) {
    const x = decode(b);
    if (Number.isNaN(x)) expect(encode(x), `NaN ${b.toString(16)}`).toSatisfy((e: number) => Number.isNaN(decode(e)));
    else if (encode(x) !== b) expect(encode(x).toString(16), `round trip of ${b.toString(16)} (${x})`).toBe(b.toString(16));
  }
}

describe('bf16', () => {
  it('encodes known values with ties to even', () => {
    expectEncodes(f32ToBf16, [
      [1, 0x3f80], [-2.5, 0xc020], [0, 0], [-0, 0x8000],
      [65504, 0x4780], // 65504 = 0x477fe000 rounds up to 65536
      [Infinity, 0x7f80], [-Infinity, 0xff80], [NaN, 0x7fc0],
      [bitsF32(0x3f808000), 0x3f80], // 1 + 2^-8: halfway, stays on the even 1
      [bitsF32(0x3f818000), 0x3f82], // 1 + 3·2^-8: halfway, rounds up to even
      [bitsF32(0x3f808001), 0x3f81], // just above halfway
      [bitsF32(0x7f7fffff), 0x7f80], // the largest f32 rounds past bf16's largest, to inf
      [bitsF32(0x00000001), 0x0000], // smallest f32 subnormal
      [bitsF32(0x00018000), 0x0002], // subnormal tie to even
    ]);
  });
  it('decodes exactly, subnormals included', () => {
    expect(bf16ToF32(0x3f80)).toBe(1);
    expect(bf16ToF32(0xc020)).toBe(-2.5);
    expect(bf16ToF32(0x0001)).toBe(2 ** -133);
    expect(bf16ToF32(0x7f80)).toBe(Infinity);
    expect(bf16ToF32(0x7fc1)).toBeNaN();
  });
  it('keeps a NaN NaN, quiet, with its sign', () => {
    expect(f32ToBf16(bitsF32(0x7f800001))).toBe(0x7fc0);
    expect(f32ToBf16(bitsF32(0xff800001))).toBe(0xffc0);
  });
  it('round-trips every bit pattern', () => expectRoundTrips(16, bf16ToF32, f32ToBf16));
});

describe('f16', () => {
  it('encodes known values with ties to even', () => {
    expectEncodes(f32ToF16, [
      [1, 0x3c00], [-2.5, 0xc100], [0, 0], [-0, 0x8000],
      [65504, 0x7bff], [65519, 0x7bff], [65520, 0x7c00], [-65520, 0xfc00], [1e10, 0x7c00],
      [Infinity, 0x7c00], [-Infinity, 0xfc00], [NaN, 0x7e00],
      [1 + 2 ** -11, 0x3c00], [1 + 3 * 2 ** -11, 0x3c02], [1 + 2 ** -11 + 2 ** -20, 0x3c01],
      [2049, 0x6800], [2051, 0x6802],
      [2 ** -14, 0x0400], // smallest normal
      [2 ** -24, 0x0001], // smallest subnormal
      [1023 * 2 ** -24, 0x03ff], // largest subnormal
      [2 ** -25, 0x0000], // halfway to the smallest subnormal: to even, zero
      [-(2 ** -25), 0x8000],
      [1.5 * 2 ** -25, 0x0001],
      [3 * 2 ** -25, 0x0002], // 1.5 · 2^-24: halfway between 1 and 2 steps, to even
      [1023.5 * 2 ** -24, 0x0400], // rounds up out of the subnormals into the smallest normal
      [2 ** -30, 0x0000],
    ]);
  });
  it('decodes exactly, subnormals included', () => {
    expect(f16ToF32(0x3c00)).toBe(1);
    expect(f16ToF32(0xc100)).toBe(-2.5);
    expect(f16ToF32(0x7bff)).toBe(65504);
    expect(f16ToF32(0x0001)).toBe(2 ** -24);
    expect(f16ToF32(0x83ff)).toBe(-1023 * 2 ** -24);
    expect(f16ToF32(0xfc00)).toBe(-Infinity);
    expect(f16ToF32(0x7e00)).toBeNaN();
    expect(Object.is(f16ToF32(0x8000), -0)).toBe(true);
  });
  it('rounds the f32 value, not the double (inputs are f32)', () => {
    // 1 + 2^-11 + 2^-30 is above the f16 tie as a double, but as an f32 it is the tie itself.
    expect(f32ToF16(1 + 2 ** -11 + 2 ** -30)).toBe(0x3c00);
  });
  it('round-trips every bit pattern', () => expectRoundTrips(16, f16ToF32, f32ToF16));
});

describe('fp8 e4m3 (OCP, saturating, no infinities)', () => {
  it('encodes known values, saturating at ±448', () => {
    expectEncodes(f32ToE4m3, [
      [1, 0x38], [-2.5, 0xc2], [0, 0], [-0, 0x80],
      [448, 0x7e], [449, 0x7e], [464, 0x7e], [1e6, 0x7e], [-1e6, 0xfe], [Infinity, 0x7e], [-Infinity, 0xfe],
      [NaN, 0x7f],
      [1 + 1 / 16, 0x38], [1 + 3 / 16, 0x3a], // ties to even
      [2 ** -6, 0x08], // smallest normal
      [2 ** -9, 0x01], // smallest subnormal
      [2 ** -10, 0x00], // halfway to it: to even, zero
      [3 * 2 ** -10, 0x02],
    ]);
  });
  it('decodes 0x7f as NaN and 0x7e as 448', () => {
    expect(e4m3ToF32(0x7f)).toBeNaN();
    expect(e4m3ToF32(0xff)).toBeNaN();
    expect(e4m3ToF32(0x7e)).toBe(448);
    expect(e4m3ToF32(0x78)).toBe(256); // exponent field 15 holds finite values
    expect(e4m3ToF32(0x01)).toBe(2 ** -9);
  });
  it('round-trips every bit pattern', () => expectRoundTrips(8, e4m3ToF32, f32ToE4m3));
});

describe('fp8 e5m2 (IEEE-like)', () => {
  it('encodes known values, overflowing to infinity', () => {
    expectEncodes(f32ToE5m2, [
      [1, 0x3c], [-2.5, 0xc1], [0, 0], [-0, 0x80],
      [57344, 0x7b], [60000, 0x7b], [61440, 0x7c], [1e6, 0x7c], [-1e6, 0xfc],
      [Infinity, 0x7c], [-Infinity, 0xfc], [NaN, 0x7e],
      [1 + 1 / 8, 0x3c], [1 + 3 / 8, 0x3e], // ties to even
      [2 ** -16, 0x01], [2 ** -17, 0x00], [3 * 2 ** -17, 0x02],
    ]);
  });
  it('decodes infinities and NaNs', () => {
    expect(e5m2ToF32(0x7c)).toBe(Infinity);
    expect(e5m2ToF32(0xfc)).toBe(-Infinity);
    expect(e5m2ToF32(0x7d)).toBeNaN();
    expect(e5m2ToF32(0x7b)).toBe(57344);
  });
  it('round-trips every bit pattern', () => expectRoundTrips(8, e5m2ToF32, f32ToE5m2));
});

describe('helpers', () => {
  it('roundTo rounds to each dtype', () => {
    expect(roundTo('f32', 1 + 2 ** -30)).toBe(1);
    expect(roundTo('bf16', 1 + 3 * 2 ** -8)).toBe(1 + 2 ** -6);
    expect(roundTo('f16', 65519)).toBe(65504);
    expect(roundTo('fp8e4m3', 1000)).toBe(448);
    expect(roundTo('fp8e5m2', 1000)).toBe(1024);
  });
  it('encodeFloats / decodeFloats invert on representable values', () => {
    const xs = [1, -2.5, 0.5, 3];
    for (const d of ['f16', 'bf16', 'fp8e4m3', 'fp8e5m2'] as const) expect([...decodeFloats(d, encodeFloats(d, xs))]).toEqual(xs);
    expect(f32Bits(bitsF32(0xdeadbeef))).toBe(0xdeadbeef);
  });
});
