import { matmulAttrs } from '../../../ops/matmul.js';
import { matmulSwiglu } from '../../../ops/matmul_swiglu.js';
import { defineKernel, grid1d } from '../kernel.js';
import { dispatchMatmul } from './matmul.js';

// The product into gu (matmul's shader), then out from its two halves (swiglu's): two dispatches.
export const matmulSwigluKernel = defineKernel({
  op: matmulSwiglu,
  shaders: ['matmul', 'swiglu'],
  run(k, { wgu, x, gu, out }, { hidden, rows, k: depth }) {
    dispatchMatmul(k, wgu!, x!, gu!, matmulAttrs(1, 2 * hidden, rows, depth, false, true));
    const n = hidden * rows;
    k.dispatch({ shader: 'swiglu', entry: 'swiglu_joined', bindings: { params: { n }, gu: gu!, out: out! }, workgroups: grid1d(n, 256) });
  },
});
