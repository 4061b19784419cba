/** grad_norm: norm and clip scale by hand, errors, determinism on WebGPU. */
import { describe, expect, it } from 'vitest';
import { CpuBackend } from '../../src/backend/cpu/cpu.js';
import { gradNorm } from '../../src/ops/grad_norm.js';
import type { OpDef } from '../../src/ops/op.js';
import { runTwiceOnWebGpu } from '../support/repeat.js';
import { hasWebGpu } from '../support/webgpu.js';

const cpu = new CpuBackend();
const f64 = (...v: number[]): Float64Array => Float64Array.from(v);

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
    const x = cpu.alloc([2], 'f32');
    const out = cpu.alloc([1], 'f32');
    expect(() => cpu.run(gradNorm, { x, out }, { n: 2, maxNorm: 0 })).toThrow(/grad_norm: argument 'out' expected shape \[2\], got \[1\]/);
  });
});

it.skipIf(!hasWebGpu)('webgpu grad_norm gives the same bits twice', async () => {
  const [a, b] = await runTwiceOnWebGpu(gradNorm as OpDef<unknown>, { n: 90001, maxNorm: 1 }, [90001], 2);
  expect(a).toEqual(b);
});
