/** scale: out = alpha · x, element-wise over a flat tensor. */
import { BF16_ROUNDED_OUTPUT, badAttr, defineOp, randn, requireDims } from './op.js';

export interface ScaleAttrs {
  readonly n: number;
  readonly alpha: number;
}

export const scale = defineOp<ScaleAttrs>({
  name: 'scale',
  summary: 'out = alpha * x (element-wise)',
  args: [
    { name: 'x', role: 'in', dtype: 'float' },
    { name: 'out', role: 'out', dtype: 'float' },
  ],
  floatDtypes: ['f32', 'bf16'],
  validate(attrs) {
    requireDims('scale', attrs, ['n']);
    if (!Number.isFinite(attrs.alpha)) badAttr('scale', 'alpha', attrs.alpha, 'expected a finite number');
  },
  shapes: ({ n }) => ({ x: [n], out: [n] }),
  reference({ x, out }, { alpha }) {
    for (let i = 0; i < out!.length; i++) out![i] = alpha * x![i]!;
  },
  cases: (s) =>
    s === 'test'
      ? [
          { label: 'n%4=1', attrs: { n: 1001, alpha: -0.37 } },
          { label: 'n=3', attrs: { n: 3, alpha: 2.5 } },
          { label: 'n%4=0', attrs: { n: 1024, alpha: 0.125 } },
        ]
      : [{ label: '16M', attrs: { n: 1 << 24, alpha: 0.5 } }],
  sample: (rng, { n }) => ({ x: randn(rng, n) }),
  // bf16: one f32 product, then one rounding to bf16.
  tolerance: { f32: 1e-7, bf16: BF16_ROUNDED_OUTPUT },
  flops: ({ n }) => n,
});
