import { axpy } from '../../../ops/axpy.js';
import { defineKernel, grid1d } from '../kernel.js';

export const axpyKernel = defineKernel({
  op: axpy,
  shaders: ['axpy'],
  run(k, { x, y }, { n, alpha }) {
    k.dispatch({ shader: 'axpy', entry: 'main', bindings: { params: { n, alpha }, x: x!, y: y! }, workgroups: grid1d(n, 256) });
  },
});
