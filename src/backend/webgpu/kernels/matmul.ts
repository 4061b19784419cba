import { fail } from '../../../errors.js';
import { matmul } from '../../../ops/matmul.js';
import { ceilDiv, defineKernel } from '../kernel.js';

/**
 * Kernel variants of shaders/matmul.wgsl, picked per call with MDLM_MATMUL_VARIANT (default
 * `default`) so one build can time them against each other; each covers every transpose, batch,
 * accumulate and shape.
 */
export const MATMUL_VARIANTS = {
  /**
   * Workgroups taken in groups of 16 row blocks, column by column (L2 reuse on large matrices):
   * the workgroups in flight cover about 16 × 16 blocks of a 4096² product instead of 8 whole rows
   * of 32. On the H200 through Vulkan, 14.6 / 28.7 / 26.4 TFLOP/s at 1024 / 2048 / 4096 against
   * `natural`'s 14.1 / 28.5 / 25.9 in the same call (bench/RESULTS.md, 2026-12-03).
   */
  default: { GROUP_M: 16 },
  /** Workgroup (x, y) computes column block x of row block y. */
  natural: { GROUP_M: 0 },
  /** `default` with 64-row blocks (4 rows of out a thread) at every size, not only for small grids. */
  rows4: { GROUP_M: 16, TM: 4 },
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

/**
 * Below this many 128 x 128 blocks' worth of output (about two waves of two blocks per SM on a
 * 132-SM H200) the grid leaves much of a large GPU idle, so use 64-row blocks: twice the
 * workgroups, half the work.
 */
const MIN_BIG_BLOCKS = 512;
/** Columns of out per workgroup (BN in the shader); rows are 128, or 64 for small grids. */
const BLOCK_N = 128;

export const matmulKernel = defineKernel({
  op: matmul,
  shaders: ['matmul'],
  run(k, { a, b, out }, { batch, m, n, k: depth, transA, transB, accumulate }) {
    const bigBlocks = batch * ceilDiv(m, 128) * ceilDiv(n, BLOCK_N);
    const variant: Readonly<Record<string, number>> = MATMUL_VARIANTS[matmulVariant()];
    const rowsPerThread = variant.TM ?? (bigBlocks >= MIN_BIG_BLOCKS ? 8 : 4);
    const blockM = 16 * rowsPerThread;
    k.dispatch({
      shader: 'matmul',
      entry: 'main',
      bindings: {
        params: { m, n, k: depth, batch_stride_a: m * depth, batch_stride_b: depth * n, batch_stride_out: m * n },
        a: a!,
        b: b!,
        out: out!,
      },
      workgroups: [ceilDiv(n, BLOCK_N), ceilDiv(m, blockM), batch],
      constants: { ...variant, TRANS_A: transA ? 1 : 0, TRANS_B: transB ? 1 : 0, ACCUMULATE: accumulate ? 1 : 0, TM: rowsPerThread },
    });
  },
});
