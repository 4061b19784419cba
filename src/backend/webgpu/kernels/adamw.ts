import { adamw, adamwCast, adamwScalars } from '../../../ops/adamw.js';
import type { AdamwAttrs } from '../../../ops/adamw.js';
import type { Tensor } from '../../../tensor.js';
import { ceilDiv, defineKernel, grid1d, type KernelContext } from '../kernel.js';

function dispatch(k: KernelContext, entry: 'main' | 'main_cast', tensors: Record<string, Tensor>, attrs: AdamwAttrs): void {
  const { n, beta1, beta2, eps } = attrs;
  k.dispatch({ shader: 'adamw', entry, bindings: { params: { n, beta1, beta2, eps, ...adamwScalars(attrs) }, ...tensors }, workgroups: grid1d(ceilDiv(n, 4), 256) });
}

export const adamwKernel = defineKernel({
  op: adamw,
  shaders: ['adamw'],
  run(k, { param, grad, m, v, clip }, attrs) {
    dispatch(k, 'main', { param: param!, grad: grad!, m: m!, v: v!, clip: clip! }, attrs);
  },
});

export const adamwCastKernel = defineKernel({
  op: adamwCast,
  shaders: ['adamw'],
  run(k, { param, grad, m, v, clip, work }, attrs) {
    dispatch(k, 'main_cast', { param: param!, grad: grad!, m: m!, v: v!, clip: clip!, work: work! }, attrs);
  },
});
