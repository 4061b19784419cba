/** References of adamw, grad_norm and reduce by hand, identities, errors, and determinism on WebGPU. */
import { describe, expect, it } from 'vitest';
import { CpuBackend } from '../../src/backend/cpu/cpu.js';
import { adamw, type AdamwAttrs } from '../../src/ops/adamw.js';
import { gradNorm } from '../../src/ops/grad_norm.js';
import { reduce, type ReduceAttrs, type ReduceKind } from '../../src/ops/reduce.js';
import type { OpDef } from '../../src/ops/op.js';
import { PhiloxStream, RngPurpose } from '../../src/rng/philox.js';
import type { Tensor } from '../../src/tensor.js';
import { hasWebGpu, webgpuBackend } from '../support/webgpu.js';

const cpu = new CpuBackend();
const f64 = (...v: number[]): Float64Array => Float64Array.from(v);

/** Call `op` on the CPU backend with f32 tensors of the given lengths; the error it throws. */
function cpuCallError<A>(op: OpDef<A>, lengths: Readonly<Record<string, number>>, attrs: A): unknown {
  const tensors: Record<string, Tensor> = {};
  for (const [name, n] of Object.entries(lengths)) tensors[name] = cpu.alloc([n], 'f32');
  try {
    cpu.run(op, tensors, attrs);
    return undefined;
  } catch (e) {
    return e;
  } finally {
    for (const t of Object.values(tensors)) cpu.free(t);
  }
}

describe('adamw reference', () => {
  const attrs: AdamwAttrs = { n: 1, lr: 0.1, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0.1, step: 1 };

  it('matches one step worked by hand', () => {
    const args = { param: f64(1), grad: f64(0.5), m: f64(0), v: f64(0), gradScale: f64(1) };
    adamw.reference(args, attrs);
    // m = 0.1·0.5 = 0.05, v = 0.001·0.25; bias-corrected m̂ = 0.5, v̂ = 0.25, √v̂ = 0.5;
    // param = 1 − 0.1·0.1·1 − 0.1·0.5 / (0.5 + 1e-8).
    expect(args.m[0]).toBeCloseTo(0.05, 15);
    expect(args.v[0]).toBeCloseTo(0.00025, 15);
    expect(args.param[0]).toBeCloseTo(1 - 0.01 - 0.05 / (0.5 + 1e-8), 15);
    expect(args.param[0]).toBeCloseTo(0.890000002, 12);
  });

  it('bias correction fades with the step', () => {
    const args = { param: f64(0), grad: f64(1), m: f64(1), v: f64(1), gradScale: f64(1) };
    adamw.reference(args, { ...attrs, weightDecay: 0, step: 10000, eps: 1e-12 });
    // m and v stay 1, corrections are ~1: the step is lr.
    expect(args.param[0]).toBeCloseTo(-0.1 / (1 - 0.9 ** 10000) * Math.sqrt(1 - 0.999 ** 10000), 12);
  });

  it('with gradScale 0.5 equals halving the gradient', () => {
    const grad = f64(0.3, -1.2, 2.5);
    const start = () => ({ param: f64(1, -2, 0.5), m: f64(0.01, 0, -0.02), v: f64(1e-4, 2e-4, 0) });
    const scaled = { ...start(), grad, gradScale: f64(0.5) };
    const halved = { ...start(), grad: grad.map((g) => g / 2), gradScale: f64(1) };
    adamw.reference(scaled, { ...attrs, n: 3 });
    adamw.reference(halved, { ...attrs, n: 3 });
    for (const k of ['param', 'm', 'v'] as const) expect([...scaled[k]]).toEqual([...halved[k]]);
  });

  it('names bad attributes and shapes', () => {
    expect(() => adamw.validate!({ ...attrs, beta1: 1 })).toThrow(/adamw: attribute 'beta1' is 1/);
    expect(() => adamw.validate!({ ...attrs, eps: 0 })).toThrow(/adamw: attribute 'eps'/);
    expect(() => adamw.validate!({ ...attrs, step: 0 })).toThrow(/adamw: attribute 'step'/);
    expect(() => adamw.validate!({ ...attrs, lr: -1 })).toThrow(/adamw: attribute 'lr'/);
    const e = cpuCallError(adamw, { param: 3, grad: 4, m: 3, v: 3, gradScale: 1 }, { ...attrs, n: 3 });
    expect(String(e)).toMatch(/adamw: argument 'grad' expected shape \[3\], got \[4\]/);
  });
});

describe('grad_norm reference', () => {
  const run = (x: number[], maxNorm: number) => {
    const out = new Float64Array(2);
    gradNorm.reference({ x: f64(...x), out }, { n: x.length, maxNorm });
    return [...out];
  };
  it('gives the L2 norm and the clip scale', () => {
    expect(run([3, 4], 0)).toEqual([5, 1]);
    expect(run([3, 4], 1)).toEqual([5, 1 / (5 + 1e-6)]);
    expect(run([3, 4], 10)).toEqual([5, 1]);
    expect(run([0, 0, 0], 1)).toEqual([0, 1]);
  });
  it('names bad attributes and shapes', () => {
    expect(() => gradNorm.validate!({ n: 2, maxNorm: -1 })).toThrow(/grad_norm: attribute 'maxNorm' is -1/);
    expect(String(cpuCallError(gradNorm, { x: 2, out: 1 }, { n: 2, maxNorm: 0 }))).toMatch(/grad_norm: argument 'out' expected shape \[2\], got \[1\]/);
  });
});

describe('reduce reference', () => {
  const x = f64(1, -2, 3, -4, 5, -6);
  const run = (kind: ReduceKind) => {
    const out = new Float64Array(2);
    reduce.reference({ x, out }, { rows: 2, cols: 3, kind });
    return [...out];
  };
  it('reduces each row', () => {
    expect(run('sum')).toEqual([2, -5]);
    expect(run('mean')).toEqual([2 / 3, -5 / 3]);
    expect(run('maxabs')).toEqual([3, 6]);
    expect(run('sumsq')).toEqual([14, 77]);
  });
  it('names bad attributes and shapes', () => {
    expect(() => reduce.validate!({ rows: 2, cols: 3, kind: 'prod' } as unknown as ReduceAttrs)).toThrow(/reduce: attribute 'kind' is "prod"; expected one of sum, mean, maxabs, sumsq/);
    expect(() => reduce.validate!({ rows: 2, cols: 0.5, kind: 'sum' })).toThrow(/reduce: attribute 'cols'/);
    const xs = cpu.alloc([3, 2], 'f32');
    const out = cpu.alloc([2], 'f32');
    expect(() => cpu.run(reduce, { x: xs, out }, { rows: 2, cols: 3, kind: 'sum' })).toThrow(/reduce: argument 'x' expected shape \[2, 3\], got \[3, 2\]/);
  });
});

describe.skipIf(!hasWebGpu)('webgpu reductions are deterministic', () => {
  async function twice(op: OpDef<unknown>, attrs: unknown, n: number, outLen: number, shape: number[]): Promise<[Float32Array, Float32Array]> {
    const gpu = (await webgpuBackend())!;
    const rng = new PhiloxStream(7, RngPurpose.harness);
    const data = new Float32Array(n).map(() => rng.normal());
    const x = gpu.alloc(shape, 'f32');
    gpu.upload(x, data);
    const results: Float32Array[] = [];
    for (let r = 0; r < 2; r++) {
      const out = gpu.alloc([outLen], 'f32');
      gpu.run(op, { x, out }, attrs);
      results.push((await gpu.download(out)) as Float32Array);
      gpu.free(out);
    }
    gpu.free(x);
    return [results[0]!, results[1]!];
  }
  it('two-stage reduce gives the same bits twice', async () => {
    const [a, b] = await twice(reduce as OpDef<unknown>, { rows: 2, cols: 60001, kind: 'sum' }, 120002, 2, [2, 60001]);
    expect([...a]).toEqual([...b]);
  });
  it('grad_norm gives the same bits twice', async () => {
    const [a, b] = await twice(gradNorm as OpDef<unknown>, { n: 90001, maxNorm: 1 }, 90001, 2, [90001]);
    expect([...a]).toEqual([...b]);
  });
});
