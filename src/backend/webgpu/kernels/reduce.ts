import { reduce } from '../../../ops/reduce.js';
import type { Tensor } from '../../../tensor.js';
import { ceilDiv, defineKernel, grid1d, type KernelContext } from '../kernel.js';

/** Enough workgroups to fill a large GPU; rows are split only while segments stay this long. */
const TARGET_GROUPS = 1024;
const MIN_SEGMENT = 4096;

/** Element map applied before combining (MAP in shaders/reduce.wgsl). */
export const ReduceMap = { identity: 0, square: 1, abs: 2 } as const;
export type ReduceMap = (typeof ReduceMap)[keyof typeof ReduceMap];

export interface SegmentPass {
  readonly rows: number;
  readonly cols: number;
  /** Segments per row: 1 reduces rows to their results, more gives [rows, segments] partials. */
  readonly segments: number;
  readonly map: ReduceMap;
  readonly useMax: boolean;
  readonly scale: number;
}

/** How many segments a row is cut into: a fixed function of the shape, so results are deterministic. */
export function segmentsFor(rows: number, cols: number): number {
  if (rows >= TARGET_GROUPS) return 1;
  return Math.max(1, Math.min(ceilDiv(TARGET_GROUPS, rows), Math.floor(cols / MIN_SEGMENT)));
}

function pow2AtLeast(n: number): number {
  let p = 1;
  while (p < n) p *= 2;
  return p;
}

/** One dispatch of shaders/reduce.wgsl: out gets rows * segments values. */
export function dispatchSegments(k: KernelContext, x: Tensor, out: Tensor, pass: SegmentPass): void {
  const { rows, cols, segments } = pass;
  const segLen = ceilDiv(cols, segments);
  // About four elements per thread before the tree, at most the whole group on one output.
  const span = Math.min(256, pow2AtLeast(ceilDiv(segLen, 4)));
  const outputs = rows * segments;
  k.dispatch({
    shader: 'reduce',
    entry: 'segments',
    bindings: { params: { outputs, cols, segments, segLen, scale: pass.scale }, x, out },
    constants: { SPAN: span, MAP: pass.map, USE_MAX: pass.useMax ? 1 : 0 },
    workgroups: grid1d(outputs, 256 / span),
  });
}

const MAP_OF = { sum: ReduceMap.identity, mean: ReduceMap.identity, sumsq: ReduceMap.square, maxabs: ReduceMap.abs } as const;

export const reduceKernel = defineKernel({
  op: reduce,
  shaders: ['reduce'],
  run(k, { x, out }, { rows, cols, kind }) {
    const useMax = kind === 'maxabs';
    const scale = kind === 'mean' ? 1 / cols : 1;
    const segments = segmentsFor(rows, cols);
    if (segments === 1) {
      dispatchSegments(k, x!, out!, { rows, cols, segments, map: MAP_OF[kind], useMax, scale });
      return;
    }
    const partials = k.scratch([rows, segments], 'f32');
    dispatchSegments(k, x!, partials, { rows, cols, segments, map: MAP_OF[kind], useMax, scale: 1 });
    dispatchSegments(k, partials, out!, { rows, cols: segments, segments: 1, map: ReduceMap.identity, useMax, scale });
  },
});
