import { add } from '../../../ops/add.js';
import { defineKernel, grid1d } from '../kernel.js';

export const addKernel = defineKernel({
  op: add,
  shaders: ['add'],
  run(k, { a, b, out }, { n }) {
    k.dispatch({ shader: 'add', entry: 'main', bindings: { params: { n }, a: a!, b: b!, out: out! }, workgroups: grid1d(n, 256) });
  },
});
