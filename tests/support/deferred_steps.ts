/** Training steps as the Trainer queues them, driven by hand: each step's AdamW deferred into the next step's first pass (or, with `deferred: false`, queued at the step's end). */
import type { LlamaModel } from '../../src/model/llama.js';
import { AdamW } from '../../src/optim/adamw.js';

/**
 * `steps` steps of `accum` passes on `m` (the first pass of a step overwriting the gradients and
 * queueing the update the step before deferred), `beforePass` first in each: every pass's loss and
 * gradients, and the parameters once the last update is flushed.
 */
export async function deferredSteps(
  m: LlamaModel, opts: { steps: number; accum: number; lr: number; deferred?: boolean; beforePass?: (step: number, micro: number) => void },
): Promise<{ passes: { loss: number; grad: Float32Array }[]; params: Float32Array }> {
  const b = m.backend;
  const opt = new AdamW(m.store, { beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1, gradClip: 1 });
  const passes: { loss: number; grad: Float32Array }[] = [];
  for (let s = 0; s < opts.steps; s++) {
    for (let micro = 0; micro < opts.accum; micro++) {
      opts.beforePass?.(s, micro);
      m.forwardBackward(micro === 0, micro === 0 ? opt.takeDeferred() : undefined);
      passes.push({ loss: await m.loss(), grad: (await b.download(m.store.grad)) as Float32Array });
    }
    opt.measure();
    opt.defer(opts.lr, s + 1);
    if (opts.deferred === false) opt.flush();
  }
  opt.flush();
  const params = (await b.download(m.store.value)) as Float32Array;
  opt.destroy();
  return { passes, params };
}
