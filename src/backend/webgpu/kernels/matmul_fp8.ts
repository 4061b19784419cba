import { type Fp8Blocks, type MatmulFp8AddAttrs, matmulFp8, matmulFp8Add } from '../../../ops/matmul_fp8.js';
import type { Tensor } from '../../../tensor.js';
import { type KernelContext, bindable, ceilDiv, defineKernel } from '../kernel.js';

/** Rows and columns of out per workgroup (BM and BN in the shader). */
const BLOCK = 64;

/** The shader's A_BLOCKS / B_BLOCKS for an operand's scaling. */
const BLOCKS_CODE: Readonly<Record<Fp8Blocks, number>> = { tensor: 0, '1x128': 1, '128x128': 2 };

/**
 * shaders/matmul_fp8.wgsl: out (+)= (a · aScaleInv)(b · bScaleInv)ᵀ, or with `residual` out =
 * residual + the product, the factors per tensor or per block. The scales may be views inside a
 * table of meta records.
 */
function dispatchMatmulFp8(k: KernelContext, args: Readonly<Record<string, Tensor>>, { m, n, k: depth, aFormat, bFormat, aBlocks, bBlocks }: MatmulFp8AddAttrs, accumulate: boolean, residual?: Tensor): void {
  k.dispatch({
    shader: 'matmul_fp8',
    entry: 'main',
    bindings: {
      params: { m, n, k: depth },
      a: args.a!,
      b: args.b!,
      a_scale_inv: bindable(k, args.aScaleInv!),
      b_scale_inv: bindable(k, args.bScaleInv!),
      out: args.out!,
      residual: residual ?? k.scratch([1], 'f32'),
    },
    workgroups: [ceilDiv(n, BLOCK), ceilDiv(m, BLOCK)],
    constants: {
      A_E5M2: aFormat === 'e5m2' ? 1 : 0,
      B_E5M2: bFormat === 'e5m2' ? 1 : 0,
      ACCUMULATE: accumulate ? 1 : 0,
      RESIDUAL: residual ? 1 : 0,
      A_BLOCKS: BLOCKS_CODE[aBlocks],
      B_BLOCKS: BLOCKS_CODE[bBlocks],
    },
  });
}

export const matmulFp8Kernel = defineKernel({
  op: matmulFp8,
  shaders: ['matmul_fp8'],
  run(k, args, attrs) {
    dispatchMatmulFp8(k, args, attrs, attrs.accumulate);
  },
});

export const matmulFp8AddKernel = defineKernel({
  op: matmulFp8Add,
  shaders: ['matmul_fp8'],
  run(k, args, attrs) {
    dispatchMatmulFp8(k, args, attrs, false, args.residual!);
  },
});
