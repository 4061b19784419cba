import { adamw, adamwCast } from '../../../ops/adamw.js';
import type { AdamwAttrs } from '../../../ops/adamw.js';
import type { Tensor } from '../../../tensor.js';
import { ceilDiv, defineKernel, grid1d, type KernelContext } from '../kernel.js';

function dispatch(k: KernelContext, entry: 'main' | 'main_cast', tensors: Record<string, Tensor>, attrs: AdamwAttrs): void {
  const { n, beta1, beta2, eps, weightDecay } = attrs;
  k.dispatch({ shader: 'adamw', entry, bindings: { params: { n, beta1, beta2, eps, weightDecay }, ...tensors }, workgroups: grid1d(ceilDiv(n, 4), 256) });
}

export const adamwKernel = defineKernel({
  op: adamw,
  shaders: ['adamw'],
  run(k, { param, grad, m, v, clip, sched }, attrs) {
    dispatch(k, 'main', { param: param!, grad: grad!, m: m!, v: v!, clip: clip!, sched: sched! }, attrs);
  },
});

export const adamwCastKernel = defineKernel({
  op: adamwCast,
  shaders: ['adamw'],
  run(k, { param, grad, m, v, clip, sched, work }, attrs) {
    dispatch(k, 'main_cast', { param: param!, grad: grad!, m: m!, v: v!, clip: clip!, sched: sched!, work: work! }, attrs);
  },
});
