/** axpy: y += alpha · x, in place: gradient accumulation (across branches and micro-batches). */
import { BF16_ROUNDED_OUTPUT, defineOp, randn, requireDims } from './op.js';

export interface AxpyAttrs {
  readonly n: number;
  readonly alpha: number;
}

export const axpy = defineOp<AxpyAttrs>({
  name: 'axpy',
  summary: 'y += alpha * x (in place)',
  args: [
    { name: 'x', role: 'in', dtype: 'float' },
    { name: 'y', role: 'inout', dtype: 'float' },
  ],
  floatDtypes: ['f32', 'bf16'],
  validate: (attrs) => requireDims('axpy', attrs, ['n']),
  shapes: ({ n }) => ({ x: [n], y: [n] }),
  reference({ x, y }, { alpha }) {
    for (let i = 0; i < y!.length; i++) y![i] = y![i]! + alpha * x![i]!;
  },
  cases: (scale) =>
    scale === 'test' ? [{ label: 'odd length', attrs: { n: 1001, alpha: -0.75 } }] : [{ label: '16M', attrs: { n: 1 << 24, alpha: 1 } }],
  sample: (rng, { n }) => ({ x: randn(rng, n), y: randn(rng, n) }),
  // bf16: one f32 fma, then one rounding to bf16.
  tolerance: { f32: 1e-7, bf16: BF16_ROUNDED_OUTPUT },
  flops: ({ n }) => 2 * n,
});
