import { matmulAttrs } from '../../../ops/matmul.js';
import { matmulSwiglu, matmulSwigluBackward } from '../../../ops/matmul_swiglu.js';
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

// dh into a scratch tensor (matmul's shader), then dG and dU from it and gu (swiglu's).
export const matmulSwigluBackwardKernel = defineKernel({
  op: matmulSwigluBackward,
  shaders: ['matmul', 'swiglu'],
  run(k, { wdown, dout, gu, dgu }, { hidden, rows, k: depth }) {
    const dh = k.scratch([hidden, rows], dgu!.dtype);
    dispatchMatmul(k, wdown!, dout!, dh, matmulAttrs(1, hidden, rows, depth, true, true));
    const n = hidden * rows;
    k.dispatch({ shader: 'swiglu', entry: 'swiglu_backward_joined', bindings: { params: { n }, dout: dh, gu: gu!, dgu: dgu! }, workgroups: grid1d(n, 256) });
  },
});
