import { fail } from '../../../errors.js';
import { type MatmulAttrs, matmul, matmulAdd } from '../../../ops/matmul.js';
import type { Tensor } from '../../../tensor.js';
import { type KernelContext, ceilDiv, defineKernel } from '../kernel.js';

/**
 * Kernel variants of shaders/matmul.wgsl, picked per call with MDLM_MATMUL_VARIANT (default
 * `default`) so one build can time them against each other; each covers every transpose, batch,
 * accumulate and shape.
 */
export const MATMUL_VARIANTS = {
  /**
   * 64 x 128 blocks (4 rows of out a thread), workgroups taken in groups of 16 row blocks, column
   * by column (L2 reuse on large matrices). On the H200 through Vulkan at 4096³, 32.4-32.6 TFLOP/s
   * against 26.2-28.9 for `rows8` in the same call; the group order against `natural`: 14.6 / 28.7
   * / 26.4 TFLOP/s at 1024 / 2048 / 4096 against 14.1 / 28.5 / 25.9 (bench/RESULTS.md, 2026-12-03
   * and 2026-12-04).
   */
  default: { GROUP_M: 16, TM: 4 },
  /** `default` with workgroup (x, y) computing column block x of row block y. */
  natural: { GROUP_M: 0, TM: 4 },
  /** `default` with 128 x 128 blocks (8 rows of out a thread): more FMAs a shared-memory read, but slower. */
  rows8: { GROUP_M: 16, TM: 8 },
} as const satisfies Record<string, Readonly<Record<string, number>>>;

export type MatmulVariantName = keyof typeof MATMUL_VARIANTS;

/** The variant MDLM_MATMUL_VARIANT names (read at every call), `default` when unset or empty. */
export function matmulVariant(name: string | undefined = process.env.MDLM_MATMUL_VARIANT): MatmulVariantName {
  if (!name) return 'default';
  if (!Object.hasOwn(MATMUL_VARIANTS, name)) {
    fail('BAD_ARGUMENT', `MDLM_MATMUL_VARIANT='${name}' is not a matmul variant; valid: ${Object.keys(MATMUL_VARIANTS).join(', ')}`);
  }
  return name as MatmulVariantName;
}

/** Columns of out per workgroup (BN in the shader); rows are 16 · TM. */
const BLOCK_N = 128;

/**
 * Dispatches matmul's shader for out (+)= op(a) · op(b) (also matmul_swiglu's first half), or with
 * `residual` out = residual + op(a) · op(b) (matmul_add).
 */
export function dispatchMatmul(k: KernelContext, a: Tensor, b: Tensor, out: Tensor, { batch, m, n, k: depth, transA, transB, accumulate }: MatmulAttrs, residual?: Tensor): void {
  const variant = MATMUL_VARIANTS[matmulVariant()];
  const blockM = 16 * variant.TM;
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
    workgroups: [ceilDiv(n, BLOCK_N), ceilDiv(m, blockM), batch],
    constants: { ...variant, TRANS_A: transA ? 1 : 0, TRANS_B: transB ? 1 : 0, ACCUMULATE: accumulate ? 1 : 0, RESIDUAL: residual ? 1 : 0 },
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
