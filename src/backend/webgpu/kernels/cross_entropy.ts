import { type CrossEntropyAttrs, crossEntropy, crossEntropyBackward, crossEntropyFused } from '../../../ops/cross_entropy.js';
import { sameView } from '../../../ops/op.js';
import type { Tensor } from '../../../tensor.js';
import { type KernelContext, defineKernel, grid1d } from '../kernel.js';

const SHADER = 'cross_entropy';
type Args = Readonly<Record<string, Tensor>>;

/**
 * One workgroup per row; logits bound twice, as scalars (row head and tail) and as vec4s (body).
 * Returns each row's (max, log Σ exp(x − max)) (lse_parts, in a scratch) for the fused gradient.
 */
function dispatchLoss(k: KernelContext, { logits, targets, weights, loss, lse }: Args, { rows, vocab }: CrossEntropyAttrs): Tensor {
  // A vec4 binding needs 16 bytes; with fewer than 4 logits the body is empty, so any will do.
  const logits4 = logits!.size >= 4 ? logits! : k.scratch([4], 'f32');
  const lseParts = k.scratch([rows, 2], 'f32');
  k.dispatch({
    shader: SHADER, entry: 'cross_entropy',
    bindings: { params: { rows, vocab }, logits: logits!, logits4, targets: targets!, weights: weights!, loss: loss!, lse: lse!, lse_parts: lseParts },
    workgroups: grid1d(rows, 1),
  });
  return lseParts;
}

/**
 * Flat over rows * vocab: a vec4 body, then the scalar tail of (rows * vocab) % 4 elements. In
 * place (dlogits is logits) the logits are copied to a scratch first: a writable storage binding
 * may not alias another binding in WebGPU.
 */
function dispatchGradient(k: KernelContext, { logits: given, targets, weights, lse, dloss, dlogits }: Args, { rows, vocab }: CrossEntropyAttrs, lseParts?: Tensor): void {
  let logits = given;
  if (sameView(given!, dlogits!)) {
    logits = k.scratch(given!.shape, given!.dtype);
    k.copy(given!, logits);
  }
  const n = rows * vocab;
  const params = { rows, vocab };
  // Without lseParts the shader never reads parts_saved, but a binding it declares needs a buffer of its size.
  const rowArgs = { targets: targets!, weights: weights!, lse_saved: lse!, parts_saved: lseParts ?? k.scratch([rows, 2], 'f32'), dloss: dloss! };
  const constants = { LSE_PARTS: lseParts ? 1 : 0 };
  if (n >= 4) {
    k.dispatch({
      shader: SHADER, entry: 'cross_entropy_backward',
      bindings: { params, logits4: logits!, ...rowArgs, dlogits4: dlogits! },
      workgroups: grid1d(Math.floor(n / 4), 256),
      constants,
    });
  }
  if (n % 4 !== 0) {
    k.dispatch({
      shader: SHADER, entry: 'cross_entropy_backward_tail',
      bindings: { params, logits: logits!, ...rowArgs, dlogits: dlogits! },
      workgroups: [1],
      constants,
    });
  }
}

export const crossEntropyKernel = defineKernel({ op: crossEntropy, shaders: [SHADER], run: (k, args, attrs) => void dispatchLoss(k, args, attrs) });

export const crossEntropyBackwardKernel = defineKernel({ op: crossEntropyBackward, shaders: [SHADER], run: (k, args, attrs) => dispatchGradient(k, args, attrs) });

/** The two dispatches one after the other (the gradient reads the (max, log s) the first wrote). */
export const crossEntropyFusedKernel = defineKernel({
  op: crossEntropyFused,
  shaders: [SHADER],
  run(k, args, attrs) {
    dispatchGradient(k, args, attrs, dispatchLoss(k, args, attrs));
  },
});
