import { blockScaleShape, blockwiseOutShape, quantizeFp8Blockwise } from '../../../ops/quantize_fp8_blockwise.js';
import { bindable, ceilDiv, defineKernel, grid1d } from '../kernel.js';

/** shaders/quantize_fp8_blockwise.wgsl's two passes: the blocks' factors (a workgroup each), then the quantised words. */
export const quantizeFp8BlockwiseKernel = defineKernel({
  op: quantizeFp8Blockwise,
  shaders: ['quantize_fp8_blockwise'],
  run(k, { x, out, scaleInv }, attrs) {
    const { rows, cols, format, transpose, block, margin } = attrs;
    const [outRows, outCols] = blockwiseOutShape(attrs);
    const [scaleRows, scaleCols] = blockScaleShape(outRows, outCols, block);
    const params = { rows, cols, margin, scale_cols: scaleCols, scale_count: scaleRows * scaleCols };
    const constants = { E5M2: format === 'e5m2' ? 1 : 0, TRANSPOSE: transpose ? 1 : 0, SQUARE: block === '128x128' ? 1 : 0 };
    const factors = bindable(k, scaleInv!);
    k.dispatch({ shader: 'quantize_fp8_blockwise', entry: 'scales', bindings: { params, x: x!, scale_inv: factors }, constants, workgroups: grid1d(scaleRows * scaleCols, 1) });
    k.dispatch({ shader: 'quantize_fp8_blockwise', entry: 'quantize', bindings: { params, x: x!, scale_inv: factors, out: out! }, constants, workgroups: grid1d(ceilDiv(rows * cols, 4), 256) });
    if (factors !== scaleInv) k.copy(factors, scaleInv!);
  },
});
