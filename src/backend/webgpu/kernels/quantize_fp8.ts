import { quantizeFp8 } from '../../../ops/quantize_fp8.js';
import { bindable, ceilDiv, defineKernel, grid1d } from '../kernel.js';

/** At most this many groups share the amax pass (enough to fill a large GPU), each thread striding over at least 8 elements. */
const AMAX_GROUPS = 1024;
const AMAX_PER_THREAD = 8;

/**
 * shaders/quantize_fp8.wgsl's three passes: amax, the scale and history[0], the quantised words
 * (quantize for one layout, bound as its out; quantize_both for both).
 */
export const quantizeFp8Kernel = defineKernel({
  op: quantizeFp8,
  shaders: ['quantize_fp8'],
  run(k, { x, meta, out, outT }, { rows, cols, format, layout, scaling, historyLen, margin }) {
    const n = rows * cols;
    const params = { rows, cols, history_len: historyLen, margin };
    const E5M2 = format === 'e5m2' ? 1 : 0;
    const amaxBits = k.scratch([1], 'u32');
    k.zero(amaxBits);
    const record = bindable(k, meta!);
    k.dispatch({ shader: 'quantize_fp8', entry: 'amax', bindings: { params, x: x!, amax_bits: amaxBits }, workgroups: [Math.min(ceilDiv(n, 256 * AMAX_PER_THREAD), AMAX_GROUPS)] });
    k.dispatch({ shader: 'quantize_fp8', entry: 'set_scale', bindings: { params, amax_bits: amaxBits, record }, constants: { E5M2, CURRENT: scaling === 'current' ? 1 : 0 }, workgroups: [1] });
    const workgroups = grid1d(ceilDiv(n, 4), 256);
    if (layout === 'both') {
      k.dispatch({ shader: 'quantize_fp8', entry: 'quantize_both', bindings: { params, x: x!, record, out: out!, out_t: outT! }, constants: { E5M2 }, workgroups });
    } else {
      const one = layout === 'cols' ? outT! : out!;
      k.dispatch({ shader: 'quantize_fp8', entry: 'quantize', bindings: { params, x: x!, record, out: one }, constants: { E5M2, TRANSPOSE: layout === 'cols' ? 1 : 0 }, workgroups });
    }
    if (record !== meta) k.copy(record, meta!);
  },
});
