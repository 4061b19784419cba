import { type CrossEntropyAttrs, crossEntropy, crossEntropyBackward, crossEntropyFused } from '../../../ops/cross_entropy.js';
import { sameView } from '../../../ops/op.js';
import type { Tensor } from '../../../tensor.js';
import { type KernelContext, defineKernel, grid1d } from '../kernel.js';

const SHADER = 'cross_entropy';
type Args = Readonly<Record<string, Tensor>>;

/** One workgroup per row; logits bound twice, as scalars (row head and tail) and as vec4s (body). */
function dispatchLoss(k: KernelContext, { logits, targets, weights, loss, lse }: Args, { rows, vocab }: CrossEntropyAttrs): void {
  // A vec4 binding needs 16 bytes; with fewer than 4 logits the body is empty, so any will do.
  const logits4 = logits!.size >= 4 ? logits! : k.scratch([4], 'f32');
  k.dispatch({
    shader: SHADER, entry: 'cross_entropy',
    bindings: { params: { rows, vocab }, logits: logits!, logits4, targets: targets!, weights: weights!, loss: loss!, lse: lse! },
    workgroups: grid1d(rows, 1),
  });
}

/**
 * Flat over rows * vocab: a vec4 body, then the scalar tail of (rows * vocab) % 4 elements. In
 * place (dlogits is logits) the logits are copied to a scratch first: a writable storage binding
 * may not alias another binding in WebGPU.
 */
function dispatchGradient(k: KernelContext, { logits: given, targets, weights, lse, dloss, dlogits }: Args, { rows, vocab }: CrossEntropyAttrs): void {
  let logits = given;
  if (sameView(given!, dlogits!)) {
    logits = k.scratch(given!.shape, given!.dtype);
    k.copy(given!, logits);
  }
  const n = rows * vocab;
  const params = { rows, vocab };
  const rowArgs = { targets: targets!, weights: weights!, lse_saved: lse!, dloss: dloss! };
  if (n >= 4) {
    k.dispatch({
      shader: SHADER, entry: 'cross_entropy_backward',
      bindings: { params, logits4: logits!, ...rowArgs, dlogits4: dlogits! },
      workgroups: grid1d(Math.floor(n / 4), 256),
    });
  }
  if (n % 4 !== 0) {
    k.dispatch({
      shader: SHADER, entry: 'cross_entropy_backward_tail',
      bindings: { params, logits: logits!, ...rowArgs, dlogits: dlogits! },
      workgroups: [1],
    });
  }
}

export const crossEntropyKernel = defineKernel({ op: crossEntropy, shaders: [SHADER], run: dispatchLoss });

export const crossEntropyBackwardKernel = defineKernel({ op: crossEntropyBackward, shaders: [SHADER], run: dispatchGradient });

/** The two dispatches one after the other (the gradient reads the lse the first wrote). */
export const crossEntropyFusedKernel = defineKernel({
  op: crossEntropyFused,
  shaders: [SHADER],
  run(k, args, attrs) {
    dispatchLoss(k, args, attrs);
    dispatchGradient(k, args, attrs);
  },
});
