import { describe, expect, it } from 'vitest';
import { CpuBackend } from '../../src/backend/cpu/cpu.js';
import { MdlmError } from '../../src/errors.js';
import { runReference } from '../../src/harness/parity.js';
import type { RefArgs } from '../../src/ops/op.js';
import { type RmsnormBackwardAttrs, type RowNormAttrs, rmsnorm, rmsnormBackward } from '../../src/ops/rmsnorm.js';
import { PhiloxStream, RngPurpose } from '../../src/rng/philox.js';
import type { Shape } from '../../src/tensor.js';

const f64 = (...v: number[]) => Float64Array.from(v);
const close = (got: ArrayLike<number>, want: readonly number[]) => want.forEach((w, i) => expect(got[i]).toBeCloseTo(w, 12));

describe('rmsnorm reference', () => {
  it('normalises [3, 4] by its root mean square', () => {
    const out = runReference(rmsnorm, { x: f64(3, 4), weight: f64(1, 1) }, { rows: 1, dim: 2, eps: 0 }, 'f32');
    const s = Math.sqrt(12.5);
    close(out.y!, [3 / s, 4 / s]);
    close(out.rstd!, [1 / s]);
  });

  it('scales by weight and adds eps inside the root, per row', () => {
    const out = runReference(rmsnorm, { x: f64(3, 4, 1, 1), weight: f64(2, -1) }, { rows: 2, dim: 2, eps: 0.5 }, 'f32');
    const s0 = Math.sqrt(12.5 + 0.5);
    const s1 = Math.sqrt(1 + 0.5);
    close(out.y!, [6 / s0, -4 / s0, 2 / s1, -1 / s1]);
  });
});

describe('rmsnorm_backward reference', () => {
  it('matches the hand-derived gradient of [3, 4]', () => {
    const r = 1 / Math.sqrt(12.5);
    const out = runReference(
      rmsnormBackward,
      { dy: f64(1, 0), x: f64(3, 4), weight: f64(1, 1), rstd: f64(r), dresidual: f64(0.5, -0.5), dweight: f64(NaN, NaN) },
      { rows: 1, dim: 2, eps: 0, accumulate: false, outF32: false },
      'f32',
    );
    // dx_j = r·dy_j·w_j − r³·(Σ dy·w·x)/D · x_j + dresidual_j, with Σ dy·w·x = 3
    close(out.dx!, [r - (r ** 3 * 3 / 2) * 3 + 0.5, -(r ** 3 * 3 / 2) * 4 - 0.5]);
    close(out.dweight!, [3 * r, 0]);
    const added = runReference(
      rmsnormBackward,
      { dy: f64(1, 0), x: f64(3, 4), weight: f64(1, 1), rstd: f64(r), dresidual: f64(0.5, -0.5), dweight: f64(10, -1) },
      { rows: 1, dim: 2, eps: 0, accumulate: true, outF32: true },
      'f32',
    );
    close(added.dweight!, [10 + 3 * r, -1]);
  });

  it('is orthogonal to x when eps = 0 (rmsnorm is scale invariant) and passes dresidual through', () => {
    const attrs: RmsnormBackwardAttrs = { rows: 3, dim: 8, eps: 0, accumulate: false, outF32: false };
    const rng = new PhiloxStream(2, RngPurpose.harness);
    const args: RefArgs = rmsnormBackward.sample(rng, attrs);
    const withoutResidual = runReference(rmsnormBackward, { ...args, dresidual: new Float64Array(24) }, attrs, 'f32');
    const withResidual = runReference(rmsnormBackward, args, attrs, 'f32');
    for (let r = 0; r < 3; r++) {
      let dot = 0;
      for (let j = 0; j < 8; j++) dot += withoutResidual.dx![r * 8 + j]! * args.x![r * 8 + j]!;
      expect(Math.abs(dot)).toBeLessThan(1e-12);
    }
    close(withResidual.dx!, [...withoutResidual.dx!].map((v, i) => v + args.dresidual![i]!));
    close(withResidual.dweight!, [...withoutResidual.dweight!]);
  });
});

describe('rmsnorm argument checks', () => {
  const cpu = new CpuBackend();
  const call = (shapes: Record<string, Shape>, attrs: RowNormAttrs) => {
    const t = Object.fromEntries(Object.entries(shapes).map(([k, s]) => [k, cpu.alloc(s, 'f32')]));
    return () => cpu.run(rmsnorm, t, attrs);
  };
  const good = { x: [7, 36], weight: [36], y: [7, 36], rstd: [7] };

  it('names the op, the argument and both shapes on a bad shape', () => {
    const run = call({ ...good, weight: [35] }, { rows: 7, dim: 36, eps: 1e-5 });
    expect(run).toThrow(MdlmError);
    expect(run).toThrow("rmsnorm: argument 'weight' expected shape [36], got [35]");
  });

  it('rejects a dim that is not a multiple of 4, a dim over the limit and a negative eps', () => {
    expect(() => rmsnorm.validate!({ rows: 7, dim: 30, eps: 1e-5 })).toThrow(/rmsnorm: attribute 'dim' is 30; expected a multiple of 4/);
    expect(() => rmsnormBackward.validate!({ rows: 7, dim: 16384, eps: 1e-5, accumulate: false, outF32: false })).toThrow(/rmsnorm_backward: attribute 'dim' is 16384; expected at most 8192/);
    expect(() => rmsnorm.validate!({ rows: 7, dim: 36, eps: -1 })).toThrow(/rmsnorm: attribute 'eps' is -1/);
    expect(() => rmsnorm.validate!({ rows: 0, dim: 36, eps: 1e-5 })).toThrow(/rmsnorm: attribute 'rows' is 0/);
  });
});
