/** add: out = a + b, element-wise over flat tensors of the same length. */
import { defineOp, randn, requireDims } from './op.js';

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
  validate: (attrs) => requireDims('add', attrs, ['n']),
  shapes: ({ n }) => ({ a: [n], b: [n], out: [n] }),
  reference({ a, b, out }) {
    for (let i = 0; i < out!.length; i++) out![i] = a![i]! + b![i]!;
  },
  cases: (scale) => (scale === 'test' ? [{ label: 'odd length', attrs: { n: 1003 } }] : [{ label: '16M', attrs: { n: 1 << 24 } }]),
  sample: (rng, { n }) => ({ a: randn(rng, n), b: randn(rng, n) }),
  tolerance: { f32: 1e-7 },
  flops: ({ n }) => n,
});
