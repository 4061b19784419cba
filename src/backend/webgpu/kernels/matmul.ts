import { fail } from '../../../errors.js';
import { matmul } from '../../../ops/matmul.js';
import { ceilDiv, defineKernel } from '../kernel.js';

/**
 * Kernel variants, picked per call with MDLM_MATMUL_VARIANT (default `default`) so one build can
 * time them against each other; each covers every transpose, batch, accumulate and shape.
 * `blockN` is the columns of out per workgroup; rows are 128, or 64 for small grids (below).
 */
interface MatmulVariant {
  readonly shader: 'matmul' | 'matmul_vec4';
  readonly blockN: number;
  readonly constants: Readonly<Record<string, number>>;
}

export const MATMUL_VARIANTS = {
  /** shaders/matmul.wgsl: scalar loads, padded shared tiles, BK 16, two barriers per step. */
  default: { shader: 'matmul', blockN: 128, constants: {} },
  /** shaders/matmul_vec4.wgsl with default's step structure: vec4 loads and shared stores. */
  vec4: { shader: 'matmul_vec4', blockN: 128, constants: { TN: 8, BK: 16, DOUBLE_BUFFER: 0 } },
  /** vec4 plus double-buffered shared tiles: one barrier per step (32 KiB of workgroup memory). */
  db: { shader: 'matmul_vec4', blockN: 128, constants: { TN: 8, BK: 16, DOUBLE_BUFFER: 1 } },
  /** db with workgroups taken in groups of 8 row blocks (L2 reuse on large matrices). */
  dbg: { shader: 'matmul_vec4', blockN: 128, constants: { TN: 8, BK: 16, DOUBLE_BUFFER: 1, GROUP_M: 8 } },
  /** db with 8-deep steps (16 KiB: more workgroups per SM, twice the barriers). */
  db8: { shader: 'matmul_vec4', blockN: 128, constants: { TN: 8, BK: 8, DOUBLE_BUFFER: 1 } },
  /** db8 with 128 x 256 blocks, 8 x 16 outputs per thread (fewer shared reads per FMA, 24 KiB). */
  wide: { shader: 'matmul_vec4', blockN: 256, constants: { TN: 16, BK: 8, DOUBLE_BUFFER: 1 } },
} as const satisfies Record<string, MatmulVariant>;

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

export const matmulKernel = defineKernel({
  op: matmul,
  shaders: ['matmul', 'matmul_vec4'],
  run(k, { a, b, out }, { batch, m, n, k: depth, transA, transB, accumulate }) {
    const v: MatmulVariant = MATMUL_VARIANTS[matmulVariant()];
    const bigBlocks = batch * ceilDiv(m, 128) * ceilDiv(n, v.blockN);
    const rowsPerThread = bigBlocks * (v.blockN / 128) >= MIN_BIG_BLOCKS ? 8 : 4;
    const blockM = 16 * rowsPerThread;
    k.dispatch({
      shader: v.shader,
      entry: 'main',
      bindings: {
        params: { m, n, k: depth, batch_stride_a: m * depth, batch_stride_b: depth * n, batch_stride_out: m * n },
        a: a!,
        b: b!,
        out: out!,
      },
      workgroups: [ceilDiv(n, v.blockN), ceilDiv(m, blockM), batch],
      constants: { ...v.constants, TRANS_A: transA ? 1 : 0, TRANS_B: transB ? 1 : 0, ACCUMULATE: accumulate ? 1 : 0, TM: rowsPerThread },
    });
  },
});
