import { matmulAttrs } from '../../../ops/matmul.js';
import { matmulRope } from '../../../ops/matmul_rope.js';
import { defineKernel } from '../kernel.js';
import { dispatchMatmul } from './matmul.js';
import { dispatchRope } from './rope.js';

// The projection into a scratch [rows, (H + G)·D] (matmul's shader), then rope from its q and k
// columns (rope's, reading the rows strided): three dispatches.
export const matmulRopeKernel = defineKernel({
  op: matmulRope,
  shaders: ['matmul', 'rope'],
  run(k, { x, w, positions, q, k: key }, { batch, seqLen, heads, kvHeads, headDim, base, inFeatures }) {
    const rows = batch * seqLen, n = (heads + kvHeads) * headDim;
    const qk = k.scratch([rows, n], q!.dtype);
    dispatchMatmul(k, x!, w!, qk, matmulAttrs(1, rows, n, inFeatures, false, true));
    const rope = { batch, seqLen, headDim, base, xStride: n };
    dispatchRope(k, 'rope', qk, positions!, q!, { ...rope, heads });
    dispatchRope(k, 'rope', qk, positions!, key!, { ...rope, heads: kvHeads }, heads * headDim);
  },
});
