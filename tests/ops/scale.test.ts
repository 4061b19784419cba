/** scale: the reference by hand and its attribute/shape errors. */
import { describe, expect, it } from 'vitest';
import { CpuBackend } from '../../src/backend/cpu/cpu.js';
import { scale } from '../../src/ops/scale.js';

const cpu = new CpuBackend();

describe('scale reference', () => {
  it('multiplies by alpha', () => {
    const out = new Float64Array(3);
    scale.reference({ x: Float64Array.of(1, -2, 0.5), out }, { n: 3, alpha: 3 });
    expect([...out]).toEqual([3, -6, 1.5]);
  });
  it('rejects a non-finite alpha and a wrong shape, naming them', () => {
    expect(() => scale.validate!({ n: 3, alpha: NaN })).toThrow(/scale: attribute 'alpha'/);
    const x = cpu.alloc([4], 'f32');
    const out = cpu.alloc([3], 'f32');
    expect(() => cpu.run(scale, { x, out }, { n: 3, alpha: 1 })).toThrow(/scale: argument 'x' expected shape \[3\], got \[4\]/);
  });
});
