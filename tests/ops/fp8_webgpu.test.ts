/**
 * FP8 on the WebGPU backend beyond what the parity walk checks: fp8 storage (four codes to a u32
 * word) through upload, download and views; the FP8 kernels on special values (NaN, infinities,
 * zeros of both signs, f32 subnormals), on views that share a word or sit inside a table of meta
 * records; fp8 casts. Each is held to the CPU backend bit for bit.
 */
import { describe, expect, it } from 'vitest';
import type { Backend } from '../../src/backend/backend.js';
import { CpuBackend } from '../../src/backend/cpu/cpu.js';
import { cast } from '../../src/ops/cast.js';
import { metaLength } from '../../src/ops/fp8.js';
import { fp8ScaleUpdate } from '../../src/ops/fp8_scale_update.js';
import { matmulFp8, matmulFp8Attrs } from '../../src/ops/matmul_fp8.js';
import { type QuantizeFp8Attrs, quantizeFp8, quantizeFp8Attrs } from '../../src/ops/quantize_fp8.js';
import type { DType, FloatDType, Tensor } from '../../src/tensor.js';
import { hasWebGpu, webgpuBackend } from '../support/webgpu.js';

const cpu = new CpuBackend();
const gpu = async (): Promise<Backend> => (await webgpuBackend())!;

/** f32 bit patterns, so that NaN, -0 and every value compare exactly. */
function bits(x: ArrayLike<number>): number[] {
  return [...new Uint32Array(Float32Array.from(x).buffer)];
}

/** Values over both formats' ranges and past them, with the special cases. */
const SPECIAL = [0, -0, 1, -2.5, 0.3, 17, 19, 447, 449, 500, -1e6, 57344, 61440, 1e9, Infinity, -Infinity, NaN, 2 ** -9, 2 ** -10, 3 * 2 ** -11, 2 ** -16, 2 ** -17, 1e-40, -1e-45];

async function roundTrip(b: Backend, dtype: DType, values: readonly number[]): Promise<number[]> {
  const t = b.alloc([values.length], dtype);
  b.upload(t, Float32Array.from(values));
  const got = bits(await b.download(t));
  b.free(t);
  return got;
}

/** What fills the bytes around a view under test (exact in both formats). */
const FILLER = 1.5;

interface QuantizeRun {
  readonly out: number[];
  readonly meta: number[];
}

/**
 * quantize_fp8 on `b` with x and meta as given; meta sits at record `site` of a table of three
 * records (a view off the binding alignment for sites > 0), each output the layout writes in a
 * view at `outOffset` of its own buffer of FILLER codes whose bytes around it must stay (the
 * other an empty tensor). `out`: the written outputs' codes, out's then outT's.
 */
async function quantizeOn(b: Backend, x: readonly number[], meta: readonly number[], attrs: QuantizeFp8Attrs, site = 0, outOffset = 0): Promise<QuantizeRun & { around: number[] }> {
  const len = metaLength(attrs.historyLen);
  const n = attrs.rows * attrs.cols;
  const tx = b.alloc([attrs.rows, attrs.cols], 'f32');
  b.upload(tx, Float32Array.from(x));
  const table = b.alloc([3 * len], 'f32');
  const init = new Float32Array(3 * len).fill(-7);
  init.set(meta, site * len);
  b.upload(table, init);
  const dtype = attrs.format === 'e4m3' ? 'fp8e4m3' : 'fp8e5m2';
  const output = (written: boolean, shape: [number, number]): { base: Tensor; view: Tensor; written: boolean } => {
    if (!written) {
      const empty = b.alloc([0], dtype);
      return { base: empty, view: empty, written };
    }
    const base = b.alloc([outOffset + n + 8], dtype);
    b.upload(base, new Float32Array(outOffset + n + 8).fill(FILLER));
    return { base, view: b.view(base, outOffset, shape), written };
  };
  const outs = [output(attrs.layout !== 'cols', [attrs.rows, attrs.cols]), output(attrs.layout !== 'rows', [attrs.cols, attrs.rows])];
  b.run(quantizeFp8, { x: tx, meta: b.view(table, site * len, [len]), out: outs[0]!.view, outT: outs[1]!.view }, attrs);
  const result: QuantizeRun & { around: number[] } = { out: [], meta: [], around: [] };
  for (const o of outs) {
    if (!o.written) continue;
    const all = await b.download(o.base);
    result.out.push(...bits(all.subarray(outOffset, outOffset + n)));
    result.around.push(...bits([...all.subarray(0, outOffset), ...all.subarray(outOffset + n)]));
  }
  const tableAfter = await b.download(table);
  result.meta.push(...bits(tableAfter.subarray(site * len, site * len + len)));
  result.around.push(...bits([...tableAfter.subarray(0, site * len), ...tableAfter.subarray(site * len + len)]));
  for (const t of [tx, table, ...outs.map((o) => o.base)]) b.free(t);
  return result;
}

describe.skipIf(!hasWebGpu)('fp8 storage on webgpu', () => {
  it('uploads and downloads both formats as the CPU backend encodes them, odd lengths included', async () => {
    const g = await gpu();
    for (const dtype of ['fp8e4m3', 'fp8e5m2'] as const) {
      for (const n of [1, 3, 5, SPECIAL.length]) {
        const values = SPECIAL.slice(0, n);
        expect(await roundTrip(g, dtype, values)).toEqual(await roundTrip(cpu, dtype, values));
      }
    }
  });

  it('reads and writes views at word offsets, reads views at any offset, and refuses writes that start inside a word', async () => {
    const g = await gpu();
    const base = g.alloc([16], 'fp8e4m3');
    g.upload(base, Float32Array.from({ length: 16 }, (_, i) => i + 1));
    g.upload(g.view(base, 4, [4]), Float32Array.of(-1, -2, -3, -4));
    expect([...(await g.download(base))]).toEqual([1, 2, 3, 4, -1, -2, -3, -4, 9, 10, 11, 12, 13, 14, 15, 16]);
    expect([...(await g.download(g.view(base, 3, [6])))]).toEqual([4, -1, -2, -3, -4, 9]);
    expect([...(await g.download(g.view(base, 13, [1])))]).toEqual([14]);
    expect(() => g.upload(g.view(base, 2, [2]), Float32Array.of(1, 2))).toThrow(/webgpu.upload: .* starts at byte 2, not a multiple of 4/);
    g.zero(g.view(base, 8, [8]));
    expect([...(await g.download(base))]).toEqual([1, 2, 3, 4, -1, -2, -3, -4, 0, 0, 0, 0, 0, 0, 0, 0]);
    g.free(base);
  });

  it('casts to and from both formats as the CPU backend does, keeping the bytes that share the last word', async () => {
    const g = await gpu();
    const fp8 = ['fp8e4m3', 'fp8e5m2'] as const;
    const pairs: [FloatDType, FloatDType][] = [...fp8.flatMap((d): [FloatDType, FloatDType][] => [['f32', d], [d, 'f32'], ['bf16', d], [d, 'f16']]), ['fp8e4m3', 'fp8e5m2'], ['fp8e5m2', 'fp8e4m3']];
    for (const [from, to] of pairs) {
      const run = async (b: Backend): Promise<number[]> => {
        const n = SPECIAL.length - 2;
        const x = b.alloc([n], from);
        b.upload(x, Float32Array.from(SPECIAL.slice(0, n)));
        const out = b.alloc([n + 3], to);
        b.upload(out, new Float32Array(n + 3).fill(3));
        b.run(cast, { x, out: b.view(out, 0, [n]) }, { n, from, to });
        const got = bits(await b.download(out));
        b.free(x);
        b.free(out);
        return got;
      };
      expect(await run(g), `${from} -> ${to}`).toEqual(await run(cpu));
    }
  });
});

describe.skipIf(!hasWebGpu)('FP8 kernels on webgpu: special values and views', () => {
  // NaN is skipped by the amax, an infinity counts; f32 subnormals, zeros of both signs.
  const x = [1, -3, NaN, 0.75, -0, 1e-40, -(2 ** -130), 300, 5e4, -7e4, 2 ** -20, 13.5];
  const finite = x.map((v) => (Number.isNaN(v) ? 2 : v));
  const cases: [string, readonly number[], readonly number[], QuantizeFp8Attrs][] = [
    ['current, a NaN in x and in history[0]', x, [NaN, 2, 0.5], quantizeFp8Attrs(3, 4, 'e4m3', 'current', 1, 0)],
    ['current, an infinite amax keeps the scale and is recorded', [...finite.slice(0, 11), -Infinity], [5, 8, 0.125], quantizeFp8Attrs(4, 3, 'e5m2', 'current', 1, 1, 'cols')],
    ['current, all zeros: history[0] = -0 stays, the scale stays', [0, -0, 0, 0], [-0, 4, 0.25], quantizeFp8Attrs(2, 2, 'e4m3', 'current', 1, 0)],
    ['current, an amax below the f32 normals takes the largest scale', [1e-40, -3e-39, 0, 2e-41], [0, 1, 1], quantizeFp8Attrs(1, 4, 'e4m3', 'current', 1, 0)],
    ['delayed, a negative history[0] rises to the amax', finite, [-1, 9, 64, 2 ** 10, 2 ** -10], quantizeFp8Attrs(4, 3, 'e4m3', 'delayed', 3, 0, 'cols')],
    ['delayed, a scale that is not a power of two', finite, [0, 3, 1 / 3], quantizeFp8Attrs(3, 4, 'e5m2', 'delayed', 1, 0)],
    ['both layouts, a NaN in x, a negative history[0]', x, [-1, 2, 0.5], quantizeFp8Attrs(4, 3, 'e5m2', 'current', 1, 0, 'both')],
    ['both layouts, delayed, a scale that is not a power of two', finite, [0, 3, 1 / 3], quantizeFp8Attrs(3, 4, 'e4m3', 'delayed', 1, 0, 'both')],
  ];
  for (const [label, xs, meta, attrs] of cases) {
    it(`quantize_fp8 ${label}: as the CPU backend, bit for bit`, async () => {
      const want = await quantizeOn(cpu, xs, meta, attrs);
      const got = await quantizeOn(await gpu(), xs, meta, attrs);
      expect(got.meta).toEqual(want.meta);
      expect(got.out).toEqual(want.out);
    });
  }

  for (const layout of ['rows', 'cols', 'both'] as const) {
    it(`quantize_fp8 (${layout}) reads and writes a meta record inside a table and keeps the bytes after a ragged output`, async () => {
      const attrs = quantizeFp8Attrs(3, 3, 'e4m3', 'current', 2, 0, layout);
      const g = await gpu();
      const want = await quantizeOn(cpu, finite.slice(0, 9), [3, 100, 1, 1], attrs, 1, 256);
      const got = await quantizeOn(g, finite.slice(0, 9), [3, 100, 1, 1], attrs, 1, 256);
      expect(got).toEqual(want);
      const outputs = layout === 'both' ? 2 : 1;
      expect(got.out.length).toBe(9 * outputs);
      expect(got.around).toEqual(bits([...new Array(outputs * (256 + 8)).fill(FILLER), ...new Array(2 * 4).fill(-7)]));
    });
  }

  it('fp8_scale_update on infinite, NaN, negative and subnormal amaxes, in a table view: as the CPU backend', async () => {
    const historyLen = 3;
    const len = metaLength(historyLen);
    const sites = [
      [Infinity, 1, 2, 8, 0.125],
      [NaN, -5, 300, 2, 0.5],
      [-Infinity, -0, 0, 16, 2 ** -4],
      [1e-40, 0, 0, 1, 1],
      [NaN, NaN, NaN, 4, 0.25],
      [2 ** 127, 3e38, 1, 1, 1],
    ];
    const run = async (b: Backend): Promise<number[]> => {
      const table = b.alloc([1 + sites.length * len], 'f32');
      b.upload(table, Float32Array.from([42, ...sites.flat()]));
      for (const format of ['e4m3', 'e5m2'] as const) {
        b.run(fp8ScaleUpdate, { meta: b.view(table, 1, [sites.length * len]) }, { sites: sites.length, historyLen, format, margin: format === 'e5m2' ? 2 : 0 });
      }
      const got = bits(await b.download(table));
      b.free(table);
      return got;
    };
    expect(await run(await gpu())).toEqual(await run(cpu));
  });

  it('matmul_fp8 reads its scales from views inside a meta table', async () => {
    const attrs = matmulFp8Attrs(5, 6, 7, 'e4m3', 'e5m2');
    const run = async (b: Backend): Promise<number[]> => {
      const a = b.alloc([5, 7], 'fp8e4m3');
      const bt = b.alloc([6, 7], 'fp8e5m2');
      b.upload(a, Float32Array.from({ length: 35 }, (_, i) => (i % 9) - 4));
      b.upload(bt, Float32Array.from({ length: 42 }, (_, i) => (i % 5) * 0.75 - 1));
      const table = b.alloc([8], 'f32');
      b.upload(table, Float32Array.from([1, 2, 0.25, 4, 5, 6, 8, 2 ** -3]));
      const out = b.alloc([5, 6], 'f32');
      b.run(matmulFp8, { a, b: bt, aScaleInv: b.view(table, 3, [1]), bScaleInv: b.view(table, 7, [1]), out }, attrs);
      const got = bits(await b.download(out));
      for (const t of [a, bt, table, out]) b.free(t);
      return got;
    };
    const got = await run(await gpu());
    expect(got).toEqual(await run(cpu));
    expect(got.some((v) => v !== 0)).toBe(true);
  });
});
