import { matmul } from '../../../ops/matmul.js';
import { ceilDiv, defineKernel } from '../kernel.js';

const BLOCK_N = 128;
/**
 * Below this many 128x128 blocks (about two waves of two blocks per SM on a 132-SM H200) the
 * grid leaves much of a large GPU idle, so use 64-row blocks: twice the workgroups, half the work.
 */
const MIN_BIG_BLOCKS = 512;

export const matmulKernel = defineKernel({
  op: matmul,
  shaders: ['matmul'],
  run(k, { a, b, out }, { batch, m, n, k: depth, transA, transB, accumulate }) {
    const bigBlocks = batch * ceilDiv(m, 128) * ceilDiv(n, BLOCK_N);
    const rowsPerThread = bigBlocks >= MIN_BIG_BLOCKS ? 8 : 4;
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
      constants: { TRANS_A: transA ? 1 : 0, TRANS_B: transB ? 1 : 0, ACCUMULATE: accumulate ? 1 : 0, TM: rowsPerThread },
    });
  },
});
