import { swiglu, swigluBackward } from '../../../ops/swiglu.js';
import { defineKernel, grid1d } from '../kernel.js';

// Each op is two dispatches: the vec4 body (skipped when n < 4: a vec4 binding needs 16 bytes)
// and the scalar tail of n % 4 elements (skipped when there is none).
export const swigluKernel = defineKernel({
  op: swiglu,
  shaders: ['swiglu'],
  run(k, { gate, up, out }, { rows, hidden }) {
    const n = rows * hidden;
    const params = { n };
    if (n >= 4) {
      k.dispatch({ shader: 'swiglu', entry: 'swiglu', bindings: { params, gate4: gate!, up4: up!, out4: out! }, workgroups: grid1d(Math.floor(n / 4), 256) });
    }
    if (n % 4 !== 0) {
      k.dispatch({ shader: 'swiglu', entry: 'swiglu_tail', bindings: { params, gate: gate!, up: up!, out: out! }, workgroups: [1] });
    }
  },
});

export const swigluBackwardKernel = defineKernel({
  op: swigluBackward,
  shaders: ['swiglu'],
  run(k, { dout, gate, up, dgate, dup }, { rows, hidden }) {
    const n = rows * hidden;
    const params = { n };
    if (n >= 4) {
      k.dispatch({
        shader: 'swiglu', entry: 'swiglu_backward',
        bindings: { params, dout4: dout!, gate4: gate!, up4: up!, dgate4: dgate!, dup4: dup! },
        workgroups: grid1d(Math.floor(n / 4), 256),
      });
    }
    if (n % 4 !== 0) {
      k.dispatch({
        shader: 'swiglu', entry: 'swiglu_backward_tail',
        bindings: { params, dout: dout!, gate: gate!, up: up!, dgate: dgate!, dup: dup! },
        workgroups: [1],
      });
    }
  },
});
