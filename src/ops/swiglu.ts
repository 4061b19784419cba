/**
 * swiglu: out = silu(gate) · up with silu(x) = x · sigmoid(x), the gated MLP activation of
 * LLaMA-style blocks (gate and up are the two halves of the MLP's first projection); and its
 * backward. Element-wise over [rows, hidden].
 */
import { BF16_ROUNDED_OUTPUT, F16_ROUNDED_OUTPUT, defineOp, gradientOf, randn, requireDims } from './op.js';

export interface SwigluAttrs {
  readonly rows: number;
  readonly hidden: number;
}

function sigmoid(x: number): number {
  return 1 / (1 + Math.exp(-x));
}

const validate = (op: string) => (attrs: SwigluAttrs) => requireDims(op, attrs, ['rows', 'hidden']);

function cases(scale: 'test' | 'bench') {
  return scale === 'test'
    ? [
        { label: '7x37 (vec4 + tail of 3)', attrs: { rows: 7, hidden: 37 } },
        { label: '3x130 (vec4 + tail of 2)', attrs: { rows: 3, hidden: 130 } },
        { label: '4x64 (no tail)', attrs: { rows: 4, hidden: 64 } },
        { label: '1x3 (tail only)', attrs: { rows: 1, hidden: 3 } },
      ]
    : [
        { label: '8192x2048', attrs: { rows: 8192, hidden: 2048 } },
        { label: '8192x5504', attrs: { rows: 8192, hidden: 5504 } },
      ];
}

export const swiglu = defineOp<SwigluAttrs>({
  name: 'swiglu',
  summary: 'out = silu(gate) * up, silu(x) = x * sigmoid(x) (element-wise)',
  args: [
    { name: 'gate', role: 'in', dtype: 'float' },
    { name: 'up', role: 'in', dtype: 'float' },
    { name: 'out', role: 'out', dtype: 'float' },
  ],
  floatDtypes: ['f32', 'bf16', 'f16'],
  validate: validate('swiglu'),
  shapes: ({ rows, hidden }) => ({ gate: [rows, hidden], up: [rows, hidden], out: [rows, hidden] }),
  reference({ gate, up, out }) {
    for (let i = 0; i < out!.length; i++) {
      const g = gate![i]!;
      out![i] = g * sigmoid(g) * up![i]!;
    }
  },
  cases,
  sample: (rng, { rows, hidden }) => ({ gate: randn(rng, rows * hidden, 3), up: randn(rng, rows * hidden) }),
  // A few f32 roundings and one exp per element; WGSL's exp is only accurate to 3 + 2|x| ULP.
  tolerance: { f32: 1e-5, bf16: BF16_ROUNDED_OUTPUT, f16: F16_ROUNDED_OUTPUT },
});

export const swigluBackward = defineOp<SwigluAttrs>({
  name: 'swiglu_backward',
  summary: 'dgate = dout * up * silu\'(gate), dup = dout * silu(gate)',
  args: [
    { name: 'dout', role: 'in', dtype: 'float' },
    { name: 'gate', role: 'in', dtype: 'float' },
    { name: 'up', role: 'in', dtype: 'float' },
    { name: 'dgate', role: 'out', dtype: 'float' },
    { name: 'dup', role: 'out', dtype: 'float' },
  ],
  floatDtypes: ['f32', 'bf16', 'f16'],
  validate: validate('swiglu_backward'),
  shapes: ({ rows, hidden }) => {
    const s = [rows, hidden];
    return { dout: s, gate: s, up: s, dgate: s, dup: s };
  },
  reference({ dout, gate, up, dgate, dup }) {
    for (let i = 0; i < dgate!.length; i++) {
      const g = gate![i]!;
      const s = sigmoid(g);
      // d/dg [g·σ(g)] = σ(g) + g·σ(g)·(1 − σ(g))
      dgate![i] = dout![i]! * up![i]! * (s + g * s * (1 - s));
      dup![i] = dout![i]! * g * s;
    }
  },
  cases,
  sample: (rng, { rows, hidden }) => {
    const n = rows * hidden;
    return { dout: randn(rng, n), gate: randn(rng, n, 3), up: randn(rng, n) };
  },
  tolerance: { f32: 1e-5, bf16: BF16_ROUNDED_OUTPUT, f16: F16_ROUNDED_OUTPUT },
  gradient: gradientOf({
    forward: swiglu,
    forwardAttrs: (a: SwigluAttrs) => a,
    inputs: { gate: 'gate', up: 'up' },
    cotangents: { out: 'dout' },
    grads: { dgate: 'gate', dup: 'up' },
  }),
});
