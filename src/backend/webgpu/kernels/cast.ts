import { cast } from '../../../ops/cast.js';
import { fail } from '../../../errors.js';
import { ceilDiv, defineKernel, grid1d } from '../kernel.js';

export const castKernel = defineKernel({
  op: cast,
  shaders: ['cast'],
  run(k, { x, out }, { n, from, to }) {
    for (const d of [from, to]) {
      if (d !== 'f32' && d !== 'f16' && d !== 'bf16') fail('UNSUPPORTED_DTYPE', `cast: webgpu has no ${d} storage; fp8 casts need --backend cpu or cuda`);
    }
    if (from === to) {
      k.copy(x!, out!);
      return;
    }
    const entry = from === 'f32' ? 'from_f32' : to === 'f32' ? 'to_f32' : 'between_16';
    const bindings = { params: { n }, [from === 'f32' ? 'x32' : 'x16']: x!, [to === 'f32' ? 'out32' : 'out16']: out! };
    k.dispatch({ shader: 'cast', entry, bindings, constants: { FROM_BF16: from === 'bf16' ? 1 : 0, TO_BF16: to === 'bf16' ? 1 : 0 }, workgroups: grid1d(ceilDiv(n, 4), 256) });
  },
});
