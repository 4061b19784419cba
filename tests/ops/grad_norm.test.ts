/** grad_norm: norm and clip scale by hand, a loss scale undone, errors, determinism on WebGPU. */
import { describe, expect, it } from 'vitest';
import { CpuBackend } from '../../src/backend/cpu/cpu.js';
import { gradNorm } from '../../src/ops/grad_norm.js';
import { PhiloxStream, RngPurpose } from '../../src/rng/philox.js';
import { hasWebGpu, webgpuBackend } from '../support/webgpu.js';

const cpu = new CpuBackend();
const f64 = (...v: number[]): Float64Array => Float64Array.from(v);

describe('grad_norm reference', () => {
  const run = (x: number[], maxNorm: number, gradScale = 1) => {
    const out = new Float64Array(2);
    gradNorm.reference({ x: f64(...x), gradScale: f64(gradScale), out }, { n: x.length, maxNorm });
    return [...out];
  };
  it('gives the L2 norm and the clip scale', () => {
    expect(run([3, 4], 0)).toEqual([5, 1]);
    expect(run([3, 4], 1)).toEqual([5, 1 / (5 + 1e-6)]);
    expect(run([3, 4], 10)).toEqual([5, 1]);
    expect(run([0, 0, 0], 1)).toEqual([0, 1]);
  });
  // Gradients carrying a loss scale S (gradScale 1/S): the norm is the unscaled gradient's, and
  // out[1], which adamw multiplies the gradient by, unscales and clips in one factor.
  it('undoes a loss scale: the norm and clip of the unscaled gradient, times gradScale', () => {
    expect(run([3 * 1024, 4 * 1024], 0, 1 / 1024)).toEqual([5, 1 / 1024]);
    expect(run([3 * 1024, 4 * 1024], 10, 1 / 1024)).toEqual([5, 1 / 1024]);
    expect(run([3 * 1024, 4 * 1024], 1, 1 / 1024)).toEqual([5, 1 / 1024 / (5 + 1e-6)]);
    // An overflowed gradient stays non-finite: adamw skips the step.
    expect(run([Infinity, 1], 1, 1 / 1024)[0]).toBe(Infinity);
    expect(Number.isNaN(run([NaN, 1], 1, 1 / 1024)[0])).toBe(true);
  });
  it('names bad attributes and shapes', () => {
    expect(() => gradNorm.validate!({ n: 2, maxNorm: -1 })).toThrow(/grad_norm: attribute 'maxNorm' is -1/);
    const x = cpu.alloc([2], 'f32');
    const gradScale = cpu.alloc([1], 'f32');
    const out = cpu.alloc([1], 'f32');
    expect(() => cpu.run(gradNorm, { x, gradScale, out }, { n: 2, maxNorm: 0 })).toThrow(/grad_norm: argument 'out' expected shape \[2\], got \[1\]/);
    expect(() => cpu.run(gradNorm, { x, out: cpu.alloc([2], 'f32') } as never, { n: 2, maxNorm: 0 })).toThrow(/grad_norm: missing argument 'gradScale'/);
  });
});

it.skipIf(!hasWebGpu)('webgpu grad_norm gives the same bits twice, and undoes a power-of-two loss scale exactly', async () => {
  const gpu = (await webgpuBackend())!;
  const n = 90001;
  const rng = new PhiloxStream(7, RngPurpose.harness);
  const values = new Float32Array(n).map(() => rng.normal());
  const x = gpu.alloc([n], 'f32');
  const scaled = gpu.alloc([n], 'f32');
  gpu.upload(x, values);
  gpu.upload(scaled, values.map((v) => v * 1024));
  const run = async (grad: typeof x, g: number): Promise<number[]> => {
    const gradScale = gpu.alloc([1], 'f32');
    const out = gpu.alloc([2], 'f32');
    gpu.upload(gradScale, Float32Array.of(g));
    gpu.run(gradNorm, { x: grad, gradScale, out }, { n, maxNorm: 1 });
    const r = [...(await gpu.download(out))];
    gpu.free(out);
    gpu.free(gradScale);
    return r;
  };
  const a = await run(x, 1);
  expect(await run(x, 1)).toEqual(a);
  // Scaling by a power of two is exact, so the unscaled norm is the same bits; the clip factor
  // carries the 2^-10 that undoes the scale.
  expect(await run(scaled, 2 ** -10)).toEqual([a[0], a[1]! * 2 ** -10]);
  gpu.free(x);
  gpu.free(scaled);
});
