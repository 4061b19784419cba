import { gelu, geluBackward } from '../../../ops/gelu.js';
import { defineKernel, grid1d } from '../kernel.js';

// Each op is two dispatches: the vec4 body (skipped when n < 4: a vec4 binding needs 16 bytes)
// and the scalar tail of n % 4 elements (skipped when there is none).
export const geluKernel = defineKernel({
  op: gelu,
  shaders: ['gelu'],
  run(k, { x, out }, { rows, hidden }) {
    const n = rows * hidden;
    const params = { n };
    if (n >= 4) k.dispatch({ shader: 'gelu', entry: 'gelu', bindings: { params, x4: x!, out4: out! }, workgroups: grid1d(Math.floor(n / 4), 256) });
    if (n % 4 !== 0) k.dispatch({ shader: 'gelu', entry: 'gelu_tail', bindings: { params, x: x!, out: out! }, workgroups: [1] });
  },
});

export const geluBackwardKernel = defineKernel({
  op: geluBackward,
  shaders: ['gelu'],
  run(k, { dout, x, dx }, { rows, hidden }) {
    const n = rows * hidden;
    const params = { n };
    if (n >= 4) {
      k.dispatch({ shader: 'gelu', entry: 'gelu_backward', bindings: { params, dout4: dout!, x4: x!, dx4: dx! }, workgroups: grid1d(Math.floor(n / 4), 256) });
    }
    if (n % 4 !== 0) {
      k.dispatch({ shader: 'gelu', entry: 'gelu_backward_tail', bindings: { params, dout: dout!, x: x!, dx: dx! }, workgroups: [1] });
    }
  },
});
