import { philox } from '../../../ops/philox.js';
import { seedKey } from '../../../rng/philox.js';
import { defineKernel, grid1d } from '../kernel.js';

export const philoxKernel = defineKernel({
  op: philox,
  shaders: ['philox'],
  run(k, { out }, { seed, step, rank, purpose, blocks }) {
    const [keyLo, keyHi] = seedKey(seed);
    k.dispatch({
      shader: 'philox',
      entry: 'main',
      bindings: { params: { blocks, step, rank, purpose, keyLo, keyHi }, out: out! },
      workgroups: grid1d(blocks, 256),
    });
  },
});
