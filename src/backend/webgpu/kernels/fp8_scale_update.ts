import { fp8ScaleUpdate } from '../../../ops/fp8_scale_update.js';
import { bindable, defineKernel, grid1d } from '../kernel.js';

/** shaders/fp8_scale_update.wgsl: one invocation per site. */
export const fp8ScaleUpdateKernel = defineKernel({
  op: fp8ScaleUpdate,
  shaders: ['fp8_scale_update'],
  run(k, { meta }, { sites, historyLen, format, margin }) {
    const record = bindable(k, meta!);
    k.dispatch({
      shader: 'fp8_scale_update',
      entry: 'main',
      bindings: { params: { sites, history_len: historyLen, margin }, record },
      constants: { E5M2: format === 'e5m2' ? 1 : 0 },
      workgroups: grid1d(sites, 64),
    });
    if (record !== meta) k.copy(record, meta!);
  },
});
