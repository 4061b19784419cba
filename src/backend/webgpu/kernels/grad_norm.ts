import { CLIP_EPS, gradNorm } from '../../../ops/grad_norm.js';
import { defineKernel } from '../kernel.js';
import { ReduceMap, dispatchSegments, segmentsFor } from './reduce.js';

export const gradNormKernel = defineKernel({
  op: gradNorm,
  shaders: ['reduce', 'grad_norm'],
  run(k, { x, gradScale, out }, { n, maxNorm }) {
    const segments = segmentsFor(1, n);
    const partials = k.scratch([segments], 'f32');
    dispatchSegments(k, x!, partials, { rows: 1, cols: n, segments, map: ReduceMap.square, useMax: false, scale: 1 });
    k.dispatch({
      shader: 'grad_norm',
      entry: 'finalize',
      bindings: { params: { count: segments, maxNorm, clipEps: CLIP_EPS }, partials, gradScale: gradScale!, out: out! },
      workgroups: [1],
    });
  },
});
