import { cast } from '../../../ops/cast.js';
import type { FloatDType } from '../../../tensor.js';
import { ceilDiv, defineKernel, grid1d } from '../kernel.js';

/** How a dtype is stored: f32, 16-bit floats two to a word, fp8 codes four to a word. */
type Side = '32' | '16' | '8';
const SIDE: Record<FloatDType, Side> = { f32: '32', f16: '16', bf16: '16', fp8e4m3: '8', fp8e5m2: '8' };

/** shaders/cast.wgsl's entry for each pair of sides (same dtypes copy instead). */
const ENTRY: Readonly<Record<string, string>> = {
  '32>16': 'from_f32', '16>32': 'to_f32', '16>16': 'between_16',
  '32>8': 'f32_to_fp8', '8>32': 'fp8_to_f32', '16>8': 'b16_to_fp8', '8>16': 'fp8_to_b16', '8>8': 'between_fp8',
};

export const castKernel = defineKernel({
  op: cast,
  shaders: ['cast'],
  run(k, { x, out }, { n, from, to }) {
    if (from === to) {
      k.copy(x!, out!);
      return;
    }
    const bindings = { params: { n }, [`x${SIDE[from]}`]: x!, [`out${SIDE[to]}`]: out! };
    const constants = { FROM_BF16: from === 'bf16' ? 1 : 0, TO_BF16: to === 'bf16' ? 1 : 0, FROM_E5M2: from === 'fp8e5m2' ? 1 : 0, TO_E5M2: to === 'fp8e5m2' ? 1 : 0 };
    k.dispatch({ shader: 'cast', entry: ENTRY[`${SIDE[from]}>${SIDE[to]}`]!, bindings, constants, workgroups: grid1d(ceilDiv(n, 4), 256) });
  },
});
