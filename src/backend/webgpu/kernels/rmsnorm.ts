import { type RowNormAttrs, rmsnorm, rmsnormBackward } from '../../../ops/rmsnorm.js';
import type { Tensor } from '../../../tensor.js';
import { type KernelContext, defineKernel, grid1d } from '../kernel.js';

const WG_SIZE = 256;
/** Backward: aim for this many workgroups, each walking a block of rows (and writing one row of
 * dweight partials), so the partials stay small and the second pass short. */
const BACKWARD_GROUPS = 512;
/** reduce_partials: vec4 columns per workgroup (REDUCE_COLS in lib/rownorm.wgsl). */
const REDUCE_COLS = 16;

/**
 * How lib/rownorm.wgsl lays a row over threads: a power-of-two team of threads per row with about
 * two vec4 columns each (small dims pack many rows into a workgroup).
 */
interface RowNormLayout {
  readonly threadsPerRow: number;
  readonly vecPerThread: number;
  /** Rows one workgroup handles at a time. */
  readonly slots: number;
}

function rowNormLayout(dim: number): RowNormLayout {
  const dim4 = dim / 4;
  let threadsPerRow = 1;
  while (threadsPerRow < WG_SIZE && threadsPerRow * 2 < dim4) threadsPerRow *= 2;
  return { threadsPerRow, vecPerThread: Math.ceil(dim4 / threadsPerRow), slots: WG_SIZE / threadsPerRow };
}

function rowNormConstants(l: RowNormLayout): Record<string, number> {
  return { THREADS_PER_ROW: l.threadsPerRow, VEC_PER_THREAD: l.vecPerThread };
}

/** Rows per backward workgroup: a multiple of the row slots. */
function backwardRowsPerGroup(rows: number, l: RowNormLayout): number {
  return Math.ceil(Math.ceil(rows / BACKWARD_GROUPS) / l.slots) * l.slots;
}

function rowNormParams({ rows, dim, eps }: RowNormAttrs, rowsPerGroup: number): Record<string, number> {
  return { rows, dim, eps, rows_per_group: rowsPerGroup };
}

/** Second pass of dweight: sum the [groups, dim] partials into `dparam` (or add them to it). */
function reducePartials(k: KernelContext, attrs: RowNormAttrs, rowsPerGroup: number, partials: Tensor, dparam: Tensor, accumulate: boolean): void {
  k.dispatch({
    shader: 'rmsnorm',
    entry: 'reduce_partials',
    bindings: { params: rowNormParams(attrs, rowsPerGroup), partials, dparam },
    workgroups: grid1d(attrs.dim / 4, REDUCE_COLS),
    constants: { ACCUMULATE: accumulate ? 1 : 0 },
  });
}

export const rmsnormKernel = defineKernel({
  op: rmsnorm,
  shaders: ['rmsnorm'],
  run(k, { x, weight, y, rstd }, attrs) {
    const layout = rowNormLayout(attrs.dim);
    k.dispatch({
      shader: 'rmsnorm',
      entry: 'rmsnorm',
      bindings: { params: rowNormParams(attrs, layout.slots), x: x!, weight: weight!, y: y!, rstd: rstd! },
      workgroups: grid1d(attrs.rows, layout.slots),
      constants: rowNormConstants(layout),
    });
  },
});

export const rmsnormBackwardKernel = defineKernel({
  op: rmsnormBackward,
  shaders: ['rmsnorm'],
  run(k, { dy, x, weight, rstd, dresidual, dx, dweight }, attrs) {
    const layout = rowNormLayout(attrs.dim);
    const rowsPerGroup = backwardRowsPerGroup(attrs.rows, layout);
    const groups = Math.ceil(attrs.rows / rowsPerGroup);
    const partials = k.scratch([groups, attrs.dim], 'f32');
    k.dispatch({
      shader: 'rmsnorm',
      entry: 'rmsnorm_backward',
      bindings: {
        params: rowNormParams(attrs, rowsPerGroup),
        dy: dy!, x: x!, weight: weight!, saved_rstd: rstd!, dresidual: dresidual!, dx: dx!, dweight_partials: partials,
      },
      workgroups: grid1d(groups, 1),
      constants: rowNormConstants(layout),
    });
    reducePartials(k, attrs, rowsPerGroup, partials, dweight!, attrs.accumulate);
  },
});
