/** reduce: each kind by hand, errors, determinism of the two-stage path on WebGPU. */
import { describe, expect, it } from 'vitest';
import { CpuBackend } from '../../src/backend/cpu/cpu.js';
import type { OpDef } from '../../src/ops/op.js';
import { type ReduceAttrs, type ReduceKind, reduce } from '../../src/ops/reduce.js';
import { runTwiceOnWebGpu } from '../support/repeat.js';
import { hasWebGpu } from '../support/webgpu.js';

const cpu = new CpuBackend();
const f64 = (...v: number[]): Float64Array => Float64Array.from(v);

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

it.skipIf(!hasWebGpu)('webgpu two-stage reduce gives the same bits twice', async () => {
  const [a, b] = await runTwiceOnWebGpu(reduce as OpDef<unknown>, { rows: 2, cols: 60001, kind: 'sum' }, [2, 60001], 2);
  expect(a).toEqual(b);
});
