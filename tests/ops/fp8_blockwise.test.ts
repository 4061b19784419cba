/**
 * Blockwise FP8 scaling (quantize_fp8_blockwise, matmul_fp8 with per-block factors) beyond what
 * the parity harness checks: the references against independent loops, blocks of zeros, the
 * scale layout cuBLASLt's block-scaled GEMM reads (element by element, padding included), and the
 * attributes' defaults and checks.
 */
import { describe, expect, it } from 'vitest';
import { inversePow2, pow2Scale, quantizeValue } from '../../src/ops/fp8.js';
import { matmulFp8, matmulFp8Add, matmulFp8Attrs } from '../../src/ops/matmul_fp8.js';
import { type Fp8Block, type QuantizeFp8BlockwiseAttrs, blockScaleShape, quantizeFp8Blockwise, quantizeFp8BlockwiseAttrs, quantizeFp8BlockwiseReference } from '../../src/ops/quantize_fp8_blockwise.js';
import { PhiloxStream } from '../../src/rng/philox.js';

const size = (shape: readonly number[]): number => shape.reduce((p, d) => p * d, 1);

/** x with values over many binades, as a Float64Array of f32 values. */
function values(rng: PhiloxStream, n: number): Float64Array {
  const x = new Float64Array(n);
  for (let i = 0; i < n; i++) x[i] = Math.fround((rng.uniform() - 0.5) * 2 ** (Math.floor(rng.uniform() * 20) - 10));
  return x;
}

function quantize(x: Float64Array, attrs: QuantizeFp8BlockwiseAttrs) {
  const shapes = quantizeFp8Blockwise.shapes(attrs);
  const out = new Float64Array(size(shapes.out!)), scaleInv = new Float64Array(size(shapes.scaleInv!));
  quantizeFp8BlockwiseReference(x, out, scaleInv, attrs);
  return { out, scaleInv };
}

describe('quantize_fp8_blockwise', () => {
  it('matches an element-by-element evaluation: each value with the scale of the block around it, in both block shapes and layouts, partial blocks included', () => {
    const rng = new PhiloxStream(21, 0);
    for (const block of ['1x128', '128x128'] as const) {
      for (const transpose of [false, true]) {
        const rows = 150, cols = 270;
        const attrs = quantizeFp8BlockwiseAttrs(rows, cols, 'e4m3', block, transpose, 1);
        const x = values(rng, rows * cols);
        const { out } = quantize(x, attrs);
        const R = transpose ? cols : rows, C = transpose ? rows : cols;
        const at = (r: number, c: number): number => (transpose ? x[c * cols + r]! : x[r * cols + c]!);
        for (let i = 0; i < 400; i++) {
          const r = Math.floor(rng.uniform() * R), c = Math.floor(rng.uniform() * C);
          // the block: out rows [r0, r1), columns [c0, c1)
          const r0 = block === '1x128' ? r : r - (r % 128), r1 = block === '1x128' ? r + 1 : Math.min(R, r0 + 128);
          const c0 = c - (c % 128), c1 = Math.min(C, c0 + 128);
          let amax = 0;
          for (let rr = r0; rr < r1; rr++) for (let cc = c0; cc < c1; cc++) amax = Math.max(amax, Math.abs(at(rr, cc)));
          const scale = pow2Scale(amax, 'e4m3', 1, 1);
          expect(out[r * C + c], `${block} ${transpose} (${r}, ${c})`).toBe(quantizeValue(at(r, c), scale, 'e4m3'));
        }
      }
    }
  });

  it('gives a block of zeros the factor 1 and zero codes, and a block with an infinity the factor 1 (NaN ignored)', () => {
    const attrs = quantizeFp8BlockwiseAttrs(2, 300, 'e5m2', '1x128');
    const x = values(new PhiloxStream(22, 0), 600);
    x.fill(0, 128, 256); // row 0, block 1
    x[300 + 5] = Infinity; // row 1, block 0
    x[300 + 130] = NaN; // row 1, block 1: its amax is the other values'
    const { out, scaleInv } = quantize(x, attrs);
    const [, ld] = blockScaleShape(2, 300, '1x128');
    expect(scaleInv[1 * ld + 0]).toBe(1);
    expect(Array.from(out.subarray(128, 256)).every((v) => v === 0)).toBe(true);
    expect(scaleInv[0 * ld + 1]).toBe(1);
    expect(out[300 + 5]).toBe(57344);
    let amax = 0;
    for (let c = 128; c < 256; c++) if (c !== 130) amax = Math.max(amax, Math.abs(x[300 + c]!));
    expect(scaleInv[1 * ld + 1]).toBe(inversePow2(pow2Scale(amax, 'e5m2', 0, 1)));
    expect(out[300 + 130]).toBeNaN();
  });

  it('lays the factors out as cuBLASLt reads them: 1x128 [ceil(C/128), roundUp(R, 4)] with a block column\'s rows contiguous, 128x128 [ceil(R/128), roundUp(ceil(C/128), 4)]; padding 0', () => {
    // Block (i, j) of out holds the value 2^(i + 2j) somewhere in it: its scale is 2^(8 - i - 2j) in e4m3 (448 = 1.75 · 2^8), its factor 2^(i + 2j - 8).
    const check = (block: Fp8Block, R: number, C: number, transpose: boolean, expected: (i: number, j: number) => number) => {
      const rows = transpose ? C : R, cols = transpose ? R : C;
      const height = block === '1x128' ? 1 : 128;
      const x = new Float64Array(rows * cols);
      for (let r = 0; r < R; r++) {
        for (let c = 0; c < C; c++) {
          const v = (r % height === 0 && c % 128 === 0 ? 1 : 0.5) * 2 ** (Math.floor(r / height) + 2 * Math.floor(c / 128));
          x[transpose ? c * cols + r : r * cols + c] = v;
        }
      }
      const { scaleInv } = quantize(x, quantizeFp8BlockwiseAttrs(rows, cols, 'e4m3', block, transpose));
      expect(scaleInv.length).toBe(size(blockScaleShape(R, C, block)));
      const want = new Float64Array(scaleInv.length);
      for (let i = 0; i < Math.ceil(R / height); i++) {
        for (let j = 0; j < Math.ceil(C / 128); j++) want[expected(i, j)] = 2 ** (i + 2 * j - 8);
      }
      expect(Array.from(scaleInv)).toEqual(Array.from(want));
    };
    // 1x128, out [5, 260]: [3, 8], row i of block column j at j · 8 + i; rows 5..7 padding
    expect(blockScaleShape(5, 260, '1x128')).toEqual([3, 8]);
    check('1x128', 5, 260, false, (i, j) => j * 8 + i);
    check('1x128', 5, 260, true, (i, j) => j * 8 + i);
    // 128x128, out [130, 300]: [2, 4], block (i, j) at i · 4 + j; column 3 padding
    expect(blockScaleShape(130, 300, '128x128')).toEqual([2, 4]);
    check('128x128', 130, 300, false, (i, j) => i * 4 + j);
    check('128x128', 130, 300, true, (i, j) => i * 4 + j);
    // Whole blocks on multiples of 4 (what cuBLASLt's GEMM takes): no padding at all.
    expect(blockScaleShape(256, 512, '1x128')).toEqual([4, 256]);
    expect(blockScaleShape(512, 2048, '128x128')).toEqual([4, 16]);
  });

  it('rejects a block shape it does not know', () => {
    expect(() => quantizeFp8Blockwise.validate!({ ...quantizeFp8BlockwiseAttrs(4, 4, 'e4m3', '1x128'), block: '1x32' as Fp8Block })).toThrow(/block/);
  });
});

describe('matmul_fp8 with per-block factors', () => {
  it('is the float64 product of the operands dequantised block by block, as an independent loop over k evaluates it', () => {
    const rng = new PhiloxStream(23, 0);
    const combos: [Fp8Block | 'tensor', Fp8Block | 'tensor'][] = [['1x128', '128x128'], ['128x128', '1x128'], ['1x128', '1x128'], ['128x128', '128x128'], ['tensor', '1x128']];
    for (const [aBlocks, bBlocks] of combos) {
      const m = 70, n = 140, k = 300;
      const attrs = matmulFp8Attrs(m, n, k, 'e4m3', 'e5m2', { aBlocks, bBlocks });
      const args = matmulFp8.sample(rng, attrs) as Record<string, Float64Array>;
      const out = new Float64Array(m * n);
      matmulFp8.reference({ ...args, out }, attrs);
      // the factor of element (r, l) of an operand with `rows` rows, from the layouts' definition
      const factor = (s: Float64Array, blocks: string, rows: number, r: number, l: number): number => {
        if (blocks === 'tensor') return s[0]!;
        const kb = Math.floor(l / 128);
        if (blocks === '1x128') return s[kb * (Math.ceil(rows / 4) * 4) + r]!;
        return s[Math.floor(r / 128) * (Math.ceil(Math.ceil(k / 128) / 4) * 4) + kb]!;
      };
      for (let t = 0; t < 50; t++) {
        const i = Math.floor(rng.uniform() * m), j = Math.floor(rng.uniform() * n);
        let want = 0;
        for (let l = 0; l < k; l++) want += args.a![i * k + l]! * factor(args.aScaleInv!, aBlocks, m, i, l) * args.b![j * k + l]! * factor(args.bScaleInv!, bBlocks, n, j, l);
        expect(out[i * n + j]! / want, `${aBlocks}·${bBlocks} (${i}, ${j})`).toBeCloseTo(1, 12);
      }
    }
  });

  it('reproduces the product of the unquantised inputs to FP8 precision when both come from quantize_fp8_blockwise', () => {
    const rng = new PhiloxStream(24, 0);
    const m = 40, n = 50, k = 260;
    // rows of very different magnitude: per-tensor scaling would flush the small ones
    const x = values(rng, m * k), w = values(rng, n * k);
    const qx = quantize(x, quantizeFp8BlockwiseAttrs(m, k, 'e4m3', '1x128')), qw = quantize(w, quantizeFp8BlockwiseAttrs(n, k, 'e4m3', '128x128'));
    const attrs = matmulFp8Attrs(m, n, k, 'e4m3', 'e4m3', { aBlocks: '1x128', bBlocks: '128x128' });
    const out = new Float64Array(m * n);
    matmulFp8.reference({ a: qx.out, b: qw.out, aScaleInv: qx.scaleInv, bScaleInv: qw.scaleInv, out }, attrs);
    let err = 0, norm = 0;
    for (let i = 0; i < m; i++) {
      for (let j = 0; j < n; j++) {
        let exact = 0;
        for (let l = 0; l < k; l++) exact += x[i * k + l]! * w[j * k + l]!;
        err += (out[i * n + j]! - exact) ** 2;
        norm += exact ** 2;
      }
    }
    expect(Math.sqrt(err / norm)).toBeLessThan(0.05);
  });

  it('defaults to per-tensor factors of shape [1], sizes blocked ones by the layout, and rejects unknown blocks', () => {
    const t = matmulFp8Attrs(200, 136, 300, 'e4m3', 'e4m3');
    expect([t.aBlocks, t.bBlocks]).toEqual(['tensor', 'tensor']);
    expect(matmulFp8.shapes(t)).toMatchObject({ aScaleInv: [1], bScaleInv: [1] });
    const b = matmulFp8Attrs(200, 136, 300, 'e4m3', 'e4m3', { aBlocks: '1x128', bBlocks: '128x128' });
    expect(matmulFp8.shapes(b)).toMatchObject({ aScaleInv: [3, 200], bScaleInv: [2, 4] });
    expect(matmulFp8Add.shapes(b)).toMatchObject({ aScaleInv: [3, 200], bScaleInv: [2, 4], residual: [200, 136] });
    expect(() => matmulFp8.validate!({ ...b, bBlocks: '64x64' as Fp8Block })).toThrow(/bBlocks/);
  });
});
