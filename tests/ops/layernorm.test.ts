import { describe, expect, it } from 'vitest';
import { CpuBackend } from '../../src/backend/cpu/cpu.js';
import { MdlmError } from '../../src/errors.js';
import { runReference } from '../../src/harness/parity.js';
import { layernorm, layernormBackward } from '../../src/ops/layernorm.js';
import type { RowNormAttrs } from '../../src/ops/rmsnorm.js';
import { PhiloxStream, RngPurpose } from '../../src/rng/philox.js';

const f64 = (...v: number[]) => Float64Array.from(v);
const close = (got: ArrayLike<number>, want: readonly number[]) => want.forEach((w, i) => expect(got[i]).toBeCloseTo(w, 12));

describe('layernorm reference', () => {
  it('normalises [1, 2, 3, 4] by hand, then applies weight and bias', () => {
    const out = runReference(layernorm, { x: f64(1, 2, 3, 4), weight: f64(1, 1, 2, 2), bias: f64(0, 1, 0, 1) }, { rows: 1, dim: 4, eps: 0 }, 'f32');
    const s = Math.sqrt(1.25); // variance of 1..4 around 2.5
    close(out.mean!, [2.5]);
    close(out.rstd!, [1 / s]);
    close(out.y!, [-1.5 / s, -0.5 / s + 1, 2 * 0.5 / s, 2 * 1.5 / s + 1]);
  });

  it('gives rows of zero mean and unit variance with weight 1 and bias 0', () => {
    const attrs: RowNormAttrs = { rows: 5, dim: 36, eps: 0 };
    const rng = new PhiloxStream(3, RngPurpose.harness);
    const x = layernorm.sample(rng, attrs).x!;
    const out = runReference(layernorm, { x, weight: new Float64Array(36).fill(1), bias: new Float64Array(36) }, attrs, 'f32');
    for (let r = 0; r < 5; r++) {
      const row = (out.y as Float64Array).subarray(r * 36, (r + 1) * 36);
      const mean = row.reduce((a, b) => a + b, 0) / 36;
      const variance = row.reduce((a, b) => a + (b - mean) ** 2, 0) / 36;
      expect(Math.abs(mean)).toBeLessThan(1e-12);
      expect(variance).toBeCloseTo(1, 12);
    }
  });
});

describe('layernorm_backward reference', () => {
  it('dx sums to zero and is orthogonal to x − mean (shift and scale invariance); dbias = Σ dy', () => {
    const attrs: RowNormAttrs = { rows: 3, dim: 8, eps: 0 };
    const rng = new PhiloxStream(4, RngPurpose.harness);
    const args = layernormBackward.sample(rng, attrs);
    const out = runReference(layernormBackward, { ...args, dresidual: new Float64Array(24) }, attrs, 'f32');
    for (let r = 0; r < 3; r++) {
      let sum = 0;
      let dot = 0;
      for (let j = 0; j < 8; j++) {
        sum += out.dx![r * 8 + j]!;
        dot += out.dx![r * 8 + j]! * (args.x![r * 8 + j]! - args.mean![r]!);
      }
      expect(Math.abs(sum)).toBeLessThan(1e-12);
      expect(Math.abs(dot)).toBeLessThan(1e-12);
    }
    for (let j = 0; j < 8; j++) expect(out.dbias![j]).toBeCloseTo(args.dy![j]! + args.dy![8 + j]! + args.dy![16 + j]!, 12);
    const withResidual = runReference(layernormBackward, args, attrs, 'f32');
    close(withResidual.dx!, [...out.dx!].map((v, i) => v + args.dresidual![i]!));
  });
});

describe('layernorm argument checks', () => {
  it('names the op, the argument and both shapes on a bad shape', () => {
    const cpu = new CpuBackend();
    const shapes = { x: [7, 100], weight: [100], bias: [4, 100], y: [7, 100], mean: [7], rstd: [7] };
    const t = Object.fromEntries(Object.entries(shapes).map(([k, s]) => [k, cpu.alloc(s, 'f32')]));
    const run = () => cpu.run(layernorm, t, { rows: 7, dim: 100, eps: 1e-5 });
    expect(run).toThrow(MdlmError);
    expect(run).toThrow("layernorm: argument 'bias' expected shape [100], got [4, 100]");
  });

  it('rejects bad attributes by name', () => {
    expect(() => layernormBackward.validate!({ rows: 7, dim: 102, eps: 1e-5 })).toThrow(/layernorm_backward: attribute 'dim' is 102/);
    expect(() => layernorm.validate!({ rows: 7, dim: 100, eps: Number.NaN })).toThrow(/layernorm: attribute 'eps'/);
  });
});
