import { adamw, adamwScalars } from '../../../ops/adamw.js';
import { ceilDiv, defineKernel, grid1d } from '../kernel.js';

export const adamwKernel = defineKernel({
  op: adamw,
  shaders: ['adamw'],
  run(k, { param, grad, m, v, clip }, attrs) {
    const { n, beta1, beta2, eps } = attrs;
    k.dispatch({
      shader: 'adamw',
      entry: 'main',
      bindings: { params: { n, beta1, beta2, eps, ...adamwScalars(attrs) }, param: param!, grad: grad!, m: m!, v: v!, clip: clip! },
      workgroups: grid1d(ceilDiv(n, 4), 256),
    });
  },
});
