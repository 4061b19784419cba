/** reduce: one value per row of x [rows, cols]: sum, mean, max |x| or sum of squares. */
import { badAttr, defineOp, randn, requireDims } from './op.js';

export const REDUCE_KINDS = ['sum', 'mean', 'maxabs', 'sumsq'] as const;
export type ReduceKind = (typeof REDUCE_KINDS)[number];

export interface ReduceAttrs {
  readonly rows: number;
  readonly cols: number;
  readonly kind: ReduceKind;
}

export const reduce = defineOp<ReduceAttrs>({
  name: 'reduce',
  summary: 'out[r] = sum / mean / max|.| / sum of squares of row r of x',
  args: [
    { name: 'x', role: 'in', dtype: 'f32' },
    { name: 'out', role: 'out', dtype: 'f32' },
  ],
  validate(attrs) {
    requireDims('reduce', attrs, ['rows', 'cols']);
    if (!REDUCE_KINDS.includes(attrs.kind)) badAttr('reduce', 'kind', attrs.kind, `expected one of ${REDUCE_KINDS.join(', ')}`);
  },
  shapes: ({ rows, cols }) => ({ x: [rows, cols], out: [rows] }),
  reference({ x, out }, { rows, cols, kind }) {
    for (let r = 0; r < rows; r++) {
      let acc = 0;
      for (let c = 0; c < cols; c++) {
        const e = x![r * cols + c]!;
        if (kind === 'maxabs') acc = Math.max(acc, Math.abs(e));
        else acc += kind === 'sumsq' ? e * e : e;
      }
      out![r] = kind === 'mean' ? acc / cols : acc;
    }
  },
  cases: (s) =>
    s === 'test'
      ? [
          { label: 'sum 5x7', attrs: { rows: 5, cols: 7, kind: 'sum' } },
          { label: 'sumsq 300x63', attrs: { rows: 300, cols: 63, kind: 'sumsq' } },
          { label: 'mean 33x1001', attrs: { rows: 33, cols: 1001, kind: 'mean' } },
          { label: 'maxabs 4x3', attrs: { rows: 4, cols: 3, kind: 'maxabs' } },
          { label: 'two-stage maxabs 3x70001', attrs: { rows: 3, cols: 70001, kind: 'maxabs' } },
          { label: 'two-stage mean 1x100003', attrs: { rows: 1, cols: 100003, kind: 'mean' } },
          { label: 'two-stage sumsq 2x40000', attrs: { rows: 2, cols: 40000, kind: 'sumsq' } },
        ]
      : [
          { label: 'sumsq 8192x2048', attrs: { rows: 8192, cols: 2048, kind: 'sumsq' } },
          { label: 'sum 1x16M', attrs: { rows: 1, cols: 1 << 24, kind: 'sum' } },
        ],
  // Normals around 1: around 0, a row's sum can cancel to near nothing, and its relative error then
  // measures the cancellation rather than the kernel (a mean of 100003 fails 1e-5 now and then).
  sample: (rng, { rows, cols }) => ({ x: randn(rng, rows * cols).map((v) => v + 1) }),
  // f32 partial sums over up to ~1e5 terms in a fixed tree; max is exact.
  tolerance: { f32: 1e-5 },
  flops: ({ rows, cols, kind }) => rows * cols * (kind === 'sumsq' ? 2 : 1),
});
