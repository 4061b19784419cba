/**
 * The FP8 scaling math every backend is held to (src/ops/fp8.ts), and the references of the FP8
 * ops against independent evaluations: power-of-two scales, saturation, amax bookkeeping, the
 * delayed recipe's update, the FP8 GEMM as the float64 product of the dequantised inputs.
 */
import { describe, expect, it } from 'vitest';
import { e4m3ToF32, e5m2ToF32, f32ToE4m3, f32ToE5m2 } from '../../src/convert.js';
import { FP8_FORMAT, inversePow2, pow2Scale, quantizeValue } from '../../src/ops/fp8.js';
import { fp8ScaleUpdateReference } from '../../src/ops/fp8_scale_update.js';
import { matmulFp8, matmulFp8Attrs } from '../../src/ops/matmul_fp8.js';
import { quantizeFp8, quantizeFp8Attrs, quantizeFp8Reference } from '../../src/ops/quantize_fp8.js';
import { PhiloxStream } from '../../src/rng/philox.js';

describe('pow2Scale', () => {
  it('is the largest power of two that keeps amax within the format, over many binades', () => {
    const rng = new PhiloxStream(3, 0);
    for (let i = 0; i < 2000; i++) {
      const amax = Math.fround(rng.uniform() * 2 ** (Math.floor(rng.uniform() * 80) - 40)) || 1;
      for (const format of ['e4m3', 'e5m2'] as const) {
        const max = FP8_FORMAT[format].max;
        const s = pow2Scale(amax, format, 0, 1);
        expect(Number.isInteger(Math.log2(s))).toBe(true);
        expect(amax * s).toBeLessThanOrEqual(max);
        expect(amax * s * 2).toBeGreaterThan(max);
        expect(pow2Scale(amax, format, 3, 1)).toBe(s / 8);
      }
    }
  });

  it('keeps the previous scale for a zero or non-finite amax, and stays within the normal f32 range', () => {
    expect(pow2Scale(0, 'e4m3', 0, 4)).toBe(4);
    expect(pow2Scale(Infinity, 'e4m3', 0, 0.5)).toBe(0.5);
    expect(pow2Scale(NaN, 'e5m2', 0, 2)).toBe(2);
    // amax exactly 448 and just above: 1, then 1/2
    expect(pow2Scale(448, 'e4m3', 0, 7)).toBe(1);
    expect(pow2Scale(Math.fround(448.5), 'e4m3', 0, 7)).toBe(0.5);
    expect(pow2Scale(1e-40, 'e4m3', 0, 1)).toBe(2 ** 126);
    expect(pow2Scale(3e38, 'e4m3', 0, 1)).toBe(2 ** -120);
    expect(inversePow2(2 ** 126)).toBe(2 ** -126);
    expect(inversePow2(2 ** -7)).toBe(128);
  });
});

describe('quantizeValue', () => {
  it('saturates both formats to their largest finite value, keeps NaN and rounds half to even', () => {
    expect(quantizeValue(1e6, 1, 'e4m3')).toBe(448);
    expect(quantizeValue(-Infinity, 1, 'e4m3')).toBe(-448);
    expect(quantizeValue(1e9, 1, 'e5m2')).toBe(57344);
    expect(quantizeValue(Infinity, 1, 'e5m2')).toBe(57344);
    expect(quantizeValue(NaN, 1, 'e5m2')).toBeNaN();
    // 17 lies halfway between the E4M3 neighbours 16 and 18: to the even mantissa, 16; 19 -> 20
    expect(quantizeValue(17, 1, 'e4m3')).toBe(16);
    expect(quantizeValue(19, 1, 'e4m3')).toBe(20);
    // the scale applies before rounding: 0.3 · 64 = 19.2 -> 20
    expect(quantizeValue(0.3, 64, 'e4m3')).toBe(20);
    expect(e4m3ToF32(f32ToE4m3(quantizeValue(-300, 1, 'e4m3')))).toBe(-288);
    expect(e5m2ToF32(f32ToE5m2(quantizeValue(5e-6, 1, 'e5m2')))).toBe(0); // under half the least subnormal, 2^-16
  });
});

describe('quantize_fp8 reference', () => {
  const x = Float64Array.from([1, -2, 300, 0.001, NaN, -0.5]); // [2, 3]
  const none = new Float64Array(0);

  it('current: sets the scale from the amax (NaN ignored), writes it and its inverse, and records the amax', () => {
    const meta = Float64Array.from([5, 1, 1]); // history [5], scale, scaleInv
    const out = new Float64Array(6);
    quantizeFp8Reference(x, meta, out, none, quantizeFp8Attrs(2, 3, 'e4m3', 'current', 1, 0));
    expect(meta[1]).toBe(1); // 300 · 1 ≤ 448 < 600
    expect(meta[2]).toBe(1);
    expect(meta[0]).toBe(300);
    expect(Array.from(out.slice(0, 4))).toEqual([1, -2, quantizeValue(300, 1, 'e4m3'), quantizeValue(0.001, 1, 'e4m3')]);
    expect(out[4]).toBeNaN();
  });

  it('delayed: quantises with the stored scale, raises history[0] only, and transposes', () => {
    const meta = Float64Array.from([400, 7, 0.25, 4]); // history [400, 7], scale 0.25, scaleInv 4
    const outT = new Float64Array(6);
    quantizeFp8Reference(x, meta, none, outT, quantizeFp8Attrs(2, 3, 'e4m3', 'delayed', 2, 0, 'cols'));
    expect(Array.from(meta)).toEqual([400, 7, 0.25, 4]);
    // outT is xᵀ [3, 2]: outT[c·2 + r] = q(x[r·3 + c] / 4)
    expect(outT[0]).toBe(0.25);
    expect(outT[2]).toBe(-0.5);
    expect(outT[4]).toBe(quantizeValue(300, 0.25, 'e4m3'));
    expect(outT[1]).toBe(quantizeValue(0.001, 0.25, 'e4m3'));
    expect(outT[3]).toBeNaN();
    meta[0] = 10;
    quantizeFp8Reference(x, meta, none, outT, quantizeFp8Attrs(2, 3, 'e4m3', 'delayed', 2, 0, 'cols'));
    expect(meta[0]).toBe(300);
  });

  it('both: writes the two layouts a rows and a cols call write, with the same scale and amax bookkeeping', () => {
    for (const scaling of ['current', 'delayed'] as const) {
      const start = Float64Array.from([100, 0.5, 2]);
      const [rowsMeta, colsMeta, bothMeta] = [start.slice(), start.slice(), start.slice()];
      const [out, outT, bothOut, bothOutT] = [0, 1, 2, 3].map(() => new Float64Array(6).fill(7)) as [Float64Array, Float64Array, Float64Array, Float64Array];
      quantizeFp8Reference(x, rowsMeta, out, none, quantizeFp8Attrs(2, 3, 'e5m2', scaling, 1, 1, 'rows'));
      quantizeFp8Reference(x, colsMeta, none, outT, quantizeFp8Attrs(2, 3, 'e5m2', scaling, 1, 1, 'cols'));
      quantizeFp8Reference(x, bothMeta, bothOut, bothOutT, quantizeFp8Attrs(2, 3, 'e5m2', scaling, 1, 1, 'both'));
      expect(Array.from(bothMeta)).toEqual(Array.from(rowsMeta));
      expect(Array.from(colsMeta)).toEqual(Array.from(rowsMeta));
      expect(Array.from(bothOut)).toEqual(Array.from(out));
      expect(Array.from(bothOutT)).toEqual(Array.from(outT));
      expect(bothOutT[1]).toBe(quantizeValue(0.001, bothMeta[1]!, 'e5m2')); // x[1, 0] at outT[0, 1]
      expect(bothOut.some((v) => v === 7) || bothOutT.some((v) => v === 7)).toBe(false);
    }
  });

  it('declares the output a layout does not write as an empty tensor', () => {
    const shapes = (layout: 'rows' | 'cols' | 'both') => quantizeFp8.shapes(quantizeFp8Attrs(2, 3, 'e4m3', 'current', 1, 0, layout));
    expect([shapes('rows').out, shapes('rows').outT]).toEqual([[2, 3], [0]]);
    expect([shapes('cols').out, shapes('cols').outT]).toEqual([[0], [3, 2]]);
    expect([shapes('both').out, shapes('both').outT]).toEqual([[2, 3], [3, 2]]);
    expect(() => quantizeFp8.validate!({ ...quantizeFp8Attrs(2, 3, 'e4m3', 'current', 1, 0), layout: 'transposed' as 'cols' })).toThrow(/layout/);
  });
});

describe('fp8_scale_update reference', () => {
  it('takes the scale from the history maximum, rolls the history, and keeps the scale where the history says nothing', () => {
    // two sites, history length 3
    const meta = Float64Array.from([3, 100, 2, 1, 1, /* site 2 */ 0, 0, 0, 8, 0.125]);
    fp8ScaleUpdateReference(meta, { sites: 2, historyLen: 3, format: 'e4m3', margin: 0 });
    expect(Array.from(meta.slice(0, 5))).toEqual([0, 3, 100, 4, 0.25]); // 100 · 4 ≤ 448
    expect(Array.from(meta.slice(5))).toEqual([0, 0, 0, 8, 0.125]);
    const inf = Float64Array.from([Infinity, 1, 2, 0.5]);
    fp8ScaleUpdateReference(inf, { sites: 1, historyLen: 2, format: 'e5m2', margin: 1 });
    expect(Array.from(inf)).toEqual([0, Infinity, 2, 0.5]);
  });
});

describe('matmul_fp8 reference', () => {
  it('is the float64 product of the dequantised operands, added to out with accumulate', () => {
    const rng = new PhiloxStream(11, 0);
    const attrs = matmulFp8Attrs(3, 4, 5, 'e4m3', 'e5m2', { accumulate: true, outF32: true });
    const a = Float64Array.from({ length: 15 }, () => quantizeValue(rng.normal() * 50, 1, 'e4m3'));
    const b = Float64Array.from({ length: 20 }, () => quantizeValue(rng.normal() * 500, 1, 'e5m2'));
    const out = Float64Array.from({ length: 12 }, () => rng.normal());
    const before = out.slice();
    matmulFp8.reference({ a, b, aScaleInv: Float64Array.of(0.5), bScaleInv: Float64Array.of(2 ** -6), out }, attrs);
    for (let i = 0; i < 3; i++) {
      for (let j = 0; j < 4; j++) {
        let s = 0;
        for (let l = 0; l < 5; l++) s += a[i * 5 + l]! * 0.5 * (b[j * 5 + l]! * 2 ** -6);
        expect(out[i * 4 + j]).toBeCloseTo(before[i * 4 + j]! + s, 12);
      }
    }
    expect(() => matmulFp8.validate!({ ...attrs, aFormat: 'e5m2' })).toThrow(/one operand must be e4m3/);
  });
});
