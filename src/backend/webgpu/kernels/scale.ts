import { scale } from '../../../ops/scale.js';
import { ceilDiv, defineKernel, grid1d } from '../kernel.js';

export const scaleKernel = defineKernel({
  op: scale,
  shaders: ['scale'],
  run(k, { x, out }, { n, alpha }) {
    k.dispatch({ shader: 'scale', entry: 'main', bindings: { params: { n, alpha }, x: x!, out: out! }, workgroups: grid1d(ceilDiv(n, 4), 256) });
  },
});
