/** add: out = a + b, element-wise over flat tensors of the same length. */
import { BF16_ROUNDED_OUTPUT, defineOp, randn, requireDims } from './op.js';

export interface AddAttrs {
  readonly n: number;
}

export const add = defineOp<AddAttrs>({
  name: 'add',
  summary: 'out = a + b (element-wise)',
  args: [
    { name: 'a', role: 'in', dtype: 'float' },
    { name: 'b', role: 'in', dtype: 'float' },
    { name: 'out', role: 'out', dtype: 'float' },
  ],
  floatDtypes: ['f32', 'bf16'],
  validate: (attrs) => requireDims('add', attrs, ['n']),
  shapes: ({ n }) => ({ a: [n], b: [n], out: [n] }),
  reference({ a, b, out }) {
    for (let i = 0; i < out!.length; i++) out![i] = a![i]! + b![i]!;
  },
  cases: (scale) => (scale === 'test' ? [{ label: 'odd length', attrs: { n: 1003 } }] : [{ label: '16M', attrs: { n: 1 << 24 } }]),
  sample: (rng, { n }) => ({ a: randn(rng, n), b: randn(rng, n) }),
  // bf16: the f32 sum of two bf16 values is (nearly always) exact; one rounding to bf16.
  tolerance: { f32: 1e-7, bf16: BF16_ROUNDED_OUTPUT },
  flops: ({ n }) => n,
});
