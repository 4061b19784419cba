/**
 * gelu: the tanh approximation of GELU used by GPT-2 and llm.c,
 *   gelu(x) = ½·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))),
 * not the exact erf form; and its backward. Element-wise over [rows, hidden].
 */
import { BF16_ROUNDED_OUTPUT, defineOp, gradientOf, randn, requireDims } from './op.js';

export interface GeluAttrs {
  readonly rows: number;
  readonly hidden: number;
}

const GELU_K = Math.sqrt(2 / Math.PI);
const GELU_C = 0.044715;

/** sigmoid(2u) = 0.5·(1 + tanh(u)), written without the cancellation of 1 + tanh(u) for u ≪ 0. */
function halfOnePlusTanh(u: number): number {
  return 1 / (1 + Math.exp(-2 * u));
}

function geluAt(x: number): number {
  return x * halfOnePlusTanh(GELU_K * (x + GELU_C * x * x * x));
}

/** d/dx: ½(1 + tanh u) + ½·x·(1 − tanh² u)·u', with ½(1 − tanh² u) = 2·σ(2u)·σ(−2u). */
function geluGradAt(x: number): number {
  const u = GELU_K * (x + GELU_C * x * x * x);
  const du = GELU_K * (1 + 3 * GELU_C * x * x);
  return halfOnePlusTanh(u) + 2 * x * halfOnePlusTanh(u) * halfOnePlusTanh(-u) * du;
}

const validate = (op: string) => (attrs: GeluAttrs) => requireDims(op, attrs, ['rows', 'hidden']);

function cases(scale: 'test' | 'bench') {
  return scale === 'test'
    ? [
        { label: '5x91 (vec4 + tail of 3)', attrs: { rows: 5, hidden: 91 } },
        { label: '4x64 (no tail)', attrs: { rows: 4, hidden: 64 } },
        { label: '1x2 (tail only)', attrs: { rows: 1, hidden: 2 } },
      ]
    : [{ label: '8192x3072', attrs: { rows: 8192, hidden: 3072 } }];
}

export const gelu = defineOp<GeluAttrs>({
  name: 'gelu',
  summary: 'out = gelu(x), tanh approximation (GPT-2, llm.c) (element-wise)',
  args: [
    { name: 'x', role: 'in', dtype: 'float' },
    { name: 'out', role: 'out', dtype: 'float' },
  ],
  floatDtypes: ['f32', 'bf16'],
  validate: validate('gelu'),
  shapes: ({ rows, hidden }) => ({ x: [rows, hidden], out: [rows, hidden] }),
  reference({ x, out }) {
    for (let i = 0; i < out!.length; i++) out![i] = geluAt(x![i]!);
  },
  cases,
  sample: (rng, { rows, hidden }) => ({ x: randn(rng, rows * hidden, 3) }),
  // A few f32 roundings and one exp per element; WGSL's exp is only accurate to 3 + 2|x| ULP.
  tolerance: { f32: 1e-5, bf16: BF16_ROUNDED_OUTPUT },
});

export const geluBackward = defineOp<GeluAttrs>({
  name: 'gelu_backward',
  summary: "dx = dout * gelu'(x), tanh approximation",
  args: [
    { name: 'dout', role: 'in', dtype: 'float' },
    { name: 'x', role: 'in', dtype: 'float' },
    { name: 'dx', role: 'out', dtype: 'float' },
  ],
  floatDtypes: ['f32', 'bf16'],
  validate: validate('gelu_backward'),
  shapes: ({ rows, hidden }) => ({ dout: [rows, hidden], x: [rows, hidden], dx: [rows, hidden] }),
  reference({ dout, x, dx }) {
    for (let i = 0; i < dx!.length; i++) dx![i] = dout![i]! * geluGradAt(x![i]!);
  },
  cases,
  sample: (rng, { rows, hidden }) => ({ dout: randn(rng, rows * hidden), x: randn(rng, rows * hidden, 3) }),
  tolerance: { f32: 1e-5, bf16: BF16_ROUNDED_OUTPUT },
  gradient: gradientOf({
    forward: gelu,
    forwardAttrs: (a: GeluAttrs) => a,
    inputs: { x: 'x' },
    cotangents: { out: 'dout' },
    grads: { dx: 'x' },
  }),
});
