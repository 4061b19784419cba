/** adamw: one step by hand, bias correction, the clip scale as a gradient multiplier, errors. */
import { describe, expect, it } from 'vitest';
import { CpuBackend } from '../../src/backend/cpu/cpu.js';
import { type AdamwAttrs, adamw, adamwSchedule } from '../../src/ops/adamw.js';

const cpu = new CpuBackend();
const f64 = (...v: number[]): Float64Array => Float64Array.from(v);

describe('adamw reference', () => {
  const attrs: AdamwAttrs = { n: 1, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0.1 };
  /** adamw's sched in float64 (the reference computes with whatever it is given). */
  const sched = (lr: number, step: number): Float64Array => f64(lr, lr / (1 - 0.9 ** step), 1 / Math.sqrt(1 - 0.999 ** step));

  it('matches one step worked by hand', () => {
    const args = { param: f64(1), grad: f64(0.5), m: f64(0), v: f64(0), clip: Float64Array.from([9, 1]), sched: sched(0.1, 1) };
    adamw.reference(args, attrs);
    // m = 0.1·0.5 = 0.05, v = 0.001·0.25; bias-corrected m̂ = 0.5, v̂ = 0.25, √v̂ = 0.5;
    // param = 1 − 0.1·0.1·1 − 0.1·0.5 / (0.5 + 1e-8).
    expect(args.m[0]).toBeCloseTo(0.05, 15);
    expect(args.v[0]).toBeCloseTo(0.00025, 15);
    expect(args.param[0]).toBeCloseTo(1 - 0.01 - 0.05 / (0.5 + 1e-8), 15);
    expect(args.param[0]).toBeCloseTo(0.890000002, 12);
  });

  it('bias correction fades with the step', () => {
    const args = { param: f64(0), grad: f64(1), m: f64(1), v: f64(1), clip: Float64Array.from([9, 1]), sched: sched(0.1, 10000) };
    adamw.reference(args, { ...attrs, weightDecay: 0, eps: 1e-12 });
    // m and v stay 1, corrections are ~1: the step is lr.
    expect(args.param[0]).toBeCloseTo(-0.1 / (1 - 0.9 ** 10000) * Math.sqrt(1 - 0.999 ** 10000), 12);
  });

  it('with clip scale 0.5 equals halving the gradient', () => {
    const grad = f64(0.3, -1.2, 2.5);
    const start = () => ({ param: f64(1, -2, 0.5), m: f64(0.01, 0, -0.02), v: f64(1e-4, 2e-4, 0) });
    const scaled = { ...start(), grad, clip: Float64Array.from([9, 0.5]), sched: sched(0.1, 1) };
    const halved = { ...start(), grad: grad.map((g) => g / 2), clip: Float64Array.from([9, 1]), sched: sched(0.1, 1) };
    adamw.reference(scaled, { ...attrs, n: 3 });
    adamw.reference(halved, { ...attrs, n: 3 });
    for (const k of ['param', 'm', 'v'] as const) expect([...scaled[k]]).toEqual([...halved[k]]);
  });

  it('adamwSchedule gives the learning rate and the bias corrections as f32', () => {
    expect([...adamwSchedule(3e-4, 1, 0.9, 0.95)]).toEqual([Math.fround(3e-4), Math.fround(3e-4 / 0.1), Math.fround(1 / Math.sqrt(0.05))]);
    const late = adamwSchedule(1e-3, 100000, 0.9, 0.95);
    expect(late[1]).toBe(Math.fround(1e-3));
    expect(late[2]).toBe(1);
  });

  it('names bad attributes and shapes', () => {
    expect(() => adamw.validate!({ ...attrs, beta1: 1 })).toThrow(/adamw: attribute 'beta1' is 1/);
    expect(() => adamw.validate!({ ...attrs, eps: 0 })).toThrow(/adamw: attribute 'eps'/);
    expect(() => adamw.validate!({ ...attrs, weightDecay: -0.1 })).toThrow(/adamw: attribute 'weightDecay'/);
    expect(() => adamwSchedule(0.1, 0, 0.9, 0.999)).toThrow(/adamw: attribute 'step' is 0/);
    expect(() => adamwSchedule(0.1, 1.5, 0.9, 0.999)).toThrow(/adamw: attribute 'step'/);
    expect(() => adamwSchedule(-1, 1, 0.9, 0.999)).toThrow(/adamw: attribute 'lr'/);
    const [param, grad, m, v, clip, s] = [3, 4, 3, 3, 2, 3].map((n) => cpu.alloc([n], 'f32'));
    expect(() => cpu.run(adamw, { param: param!, grad: grad!, m: m!, v: v!, clip: clip!, sched: s! }, { ...attrs, n: 3 })).toThrow(
      /adamw: argument 'grad' expected shape \[3\], got \[4\]/,
    );
  });
});
