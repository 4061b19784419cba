import { type MatmulAttrs, matmul, matmulAdd } from '../../../ops/matmul.js';
import type { Tensor } from '../../../tensor.js';
import { type KernelContext, ceilDiv, defineKernel } from '../kernel.js';

/** Rows and columns of out per workgroup (BM and BN in the shader). */
const BLOCK_M = 64;
const BLOCK_N = 128;

/**
 * Dispatches matmul's shader for out (+)= op(a) · op(b) (also matmul_swiglu's first half), or with
 * `residual` out = residual + op(a) · op(b) (matmul_add).
 */
export function dispatchMatmul(k: KernelContext, a: Tensor, b: Tensor, out: Tensor, { batch, m, n, k: depth, transA, transB, accumulate }: MatmulAttrs, residual?: Tensor): void {
  k.dispatch({
    shader: 'matmul',
    entry: 'main',
    bindings: {
      params: { m, n, k: depth, batch_stride_a: m * depth, batch_stride_b: depth * n, batch_stride_out: m * n },
      a,
      b,
      out,
      residual: residual ?? k.scratch([1], 'f32'),
    },
    workgroups: [ceilDiv(n, BLOCK_N), ceilDiv(m, BLOCK_M), batch],
    constants: { TRANS_A: transA ? 1 : 0, TRANS_B: transB ? 1 : 0, ACCUMULATE: accumulate ? 1 : 0, RESIDUAL: residual ? 1 : 0 },
  });
}

export const matmulKernel = defineKernel({
  op: matmul,
  shaders: ['matmul'],
  run(k, { a, b, out }, attrs) {
    dispatchMatmul(k, a!, b!, out!, attrs);
  },
});

export const matmulAddKernel = defineKernel({
  op: matmulAdd,
  shaders: ['matmul'],
  run(k, { a, b, residual, out }, attrs) {
    dispatchMatmul(k, a!, b!, out!, { ...attrs, accumulate: false, outF32: false }, residual!);
  },
});
