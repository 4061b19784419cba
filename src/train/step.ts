/**
 * One optimizer step, as the Trainer and `mdlm bench train` run it: the objective hands each
 * micro-batch to the model, forward and backward, the gradients summed over the data-parallel
 * ranks, the gradient norm, and AdamW deferred into the next step's pass; batches are made one
 * ahead while the device works.
 */
import type { TrainConfig } from '../config/schema.js';
import { type Collectives, SOLO, sumOverRanks } from '../dist/collectives.js';
import { allGatherParams, globalNorm, reduceScatterGrads } from '../dist/zero.js';
import { MdlmError } from '../errors.js';
import type { LlamaModel } from '../model/llama.js';
import type { BatchShard, Objective, TokenBatch } from '../objectives/objective.js';
import type { AdamW } from '../optim/adamw.js';

/** What one optimizer step works on. */
export interface StepParts {
  readonly model: LlamaModel;
  readonly objective: Objective;
  readonly optimizer: AdamW;
  /**
   * The data-parallel ranks (default: this process alone). Each holds its rows of every global
   * batch, and the loss gradient carries 1 / (gradAccum · worldSize) (LlamaModel.setLossScale),
   * so the gradients summed over the ranks are those of the global batch's mean loss.
   */
  readonly group?: Collectives;
}

/** The rows of a global batch that `batch` holds on this rank of `group`; undefined alone (all of them). */
export function shardOf(group: Collectives, batch: Pick<TokenBatch, 'batchSize'>): BatchShard | undefined {
  return group.worldSize === 1 ? undefined : { first: group.rank * batch.batchSize, total: group.worldSize * batch.batchSize };
}

/**
 * Batches one ahead: `prefetch` makes the next batch while the device still runs the current
 * step, so the host's batch work (sampling, tokens) leaves the device no idle time; `take` hands
 * it over. `state` is the source's position before any batch made ahead and not yet taken, so a
 * checkpoint resumes at the first batch not trained on.
 */
export class Lookahead<S> {
  private ahead: { batch: TokenBatch; before: S } | undefined;

  constructor(private readonly make: () => TokenBatch, private readonly position: () => S) {}

  take(): TokenBatch {
    const batch = this.ahead?.batch ?? this.make();
    this.ahead = undefined;
    return batch;
  }

  prefetch(): void {
    if (this.ahead) return;
    const before = structuredClone(this.position());
    this.ahead = { batch: this.make(), before };
  }

  state(): S {
    return this.ahead ? this.ahead.before : this.position();
  }

  /** Drop a batch made ahead (the source was moved: a resume). */
  reset(): void {
    this.ahead = undefined;
  }
}

/** What a step reports: the loss of the global batch, the norm of its gradient, and what every rank decided. */
export interface StepResult {
  readonly loss: number;
  readonly gradNorm: number;
  /** The loss and the norm are finite (else the update was skipped). */
  readonly finite: boolean;
  /** Some rank asked to stop after this step (`stopRequested`): every rank stops at the same step. */
  readonly stop: boolean;
}

/**
 * One optimizer step at 0-based `step`: `gradAccum` micro-batches of (prepare, forward, backward;
 * the first one's gradients overwrite the last step's), the gradients summed over the ranks, the
 * global gradient norm, then AdamW at `lr` (deferred into the next step's first pass: queueStep),
 * skipped where the loss or the norm is not finite (an error under nonFinite 'stop', a skipped
 * update under 'skip').
 * The update is queued without reading the norm first: a non-finite norm makes the device's AdamW
 * step the identity (src/ops/adamw.ts), and a non-finite loss comes from non-finite logits, so
 * with a non-finite norm. The loss and the norm are read once, after the whole step, so the
 * device waits for the host only between steps; the next batch is made while it runs this one.
 * Every rank decides alike: the norm is of the summed gradient (a NaN on one rank is a NaN on
 * all), the loss is the mean over the ranks' losses, and `stopRequested` (asked after the step)
 * is a vote that stops every rank when any rank votes for it.
 */
export async function optimizerStep(
  parts: StepParts, batches: Lookahead<unknown>, step: number, gradAccum: number, lr: number, nonFinite: TrainConfig['train']['nonFinite'],
  stopRequested: () => boolean = () => false,
): Promise<StepResult> {
  const { model, optimizer } = parts;
  const group = parts.group ?? SOLO;
  let loss = await queueStep(parts, batches, step, gradAccum, lr);
  loss += (await model.loss()) / gradAccum;
  const [gradNorm] = (await model.backend.download(optimizer.normOut)) as Float32Array;
  let stop = stopRequested();
  if (group.worldSize > 1) {
    const [losses, votes] = await sumOverRanks(group, [loss, stop ? 1 : 0]);
    loss = losses! / group.worldSize;
    stop = votes! > 0;
  }
  const finite = Number.isFinite(loss) && Number.isFinite(gradNorm!);
  if (!finite && nonFinite === 'stop') {
    throw new MdlmError('BAD_CONFIG', `non-finite ${Number.isFinite(loss) ? 'gradient norm' : 'loss'} at step ${step} (loss ${loss}, grad norm ${gradNorm}); the update was skipped and nothing was saved. Lower train.lr, or set train.nonFinite skip`);
  }
  return { loss, gradNorm: gradNorm!, finite, stop };
}

/**
 * optimizerStep's work without its read-back: the micro-batches queued, the gradients summed over
 * the ranks (one all-reduce of the flat gradient buffer a step, after the last micro-batch; none
 * alone; under a sharded optimizer a reduce-scatter, the update of this rank's shard and an
 * all-gather of the weights, not deferred), the gradient norm queued, and AdamW deferred: the next step's first pass queues it
 * before its forward, inside its recording (one graph a step on CUDA); whatever reads the
 * parameters before then calls `optimizer.flush()` first (the Trainer does). The first pass also
 * queues the update deferred by the step before, if any.
 * Returns the loss of the micro-batches before the last (read before the next overwrites it; 0
 * with one), as a share of the step's mean; the last one's is in the model's loss buffer.
 */
export async function queueStep(parts: StepParts, batches: Lookahead<unknown>, step: number, gradAccum: number, lr: number): Promise<number> {
  const { model, objective, optimizer } = parts;
  const group = parts.group ?? SOLO;
  let loss = 0;
  for (let micro = 0; micro < gradAccum; micro++) {
    const batch = batches.take();
    await objective.prepare(model, batch, step * gradAccum + micro, shardOf(group, batch));
    // The first micro-batch's gradients replace the last step's: no zeroing, no read-back in the GEMMs.
    model.forwardBackward(micro === 0, micro === 0 ? optimizer.takeDeferred() : undefined);
    batches.prefetch();
    if (micro < gradAccum - 1) loss += (await model.loss()) / gradAccum;
  }
  const { shard } = optimizer;
  if (shard.size < shard.total) {
    // train.zero 1 (src/dist/zero.ts): the update runs now, as the weights are gathered after it.
    await reduceScatterGrads(group, model.store, shard);
    optimizer.measure();
    await globalNorm(group, model.backend, optimizer.normOut, optimizer.opts.gradClip, optimizer.gradScaleValue);
    optimizer.update(lr, step + 1);
    await allGatherParams(group, model.store, shard);
    return loss;
  }
  if (group.worldSize > 1) await group.allReduceTensor(model.backend, optimizer.store.grad);
  optimizer.measure();
  optimizer.defer(lr, step + 1);
  return loss;
}

