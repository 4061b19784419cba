/**
 * Masked diffusion (MDLM / LLaDA / MegaDLMs): bidirectional attention, absorbing [MASK] noise.
 * Per sequence a noise level t ~ U(tMin, tMax) (antithetic across the batch by default); each
 * token is masked with probability 1 − α(t) by the Philox-keyed `diffusion_mask` op, so the same
 * seed masks the same tokens on every backend; masked tokens carry the loss weight w(t), the rest
 * zero; the loss is normalised by the token count.
 */
import type { Backend } from '../backend/backend.js';
import type { LlamaModel } from '../model/llama.js';
import { diffusionMask } from '../ops/diffusion_mask.js';
import { PhiloxStream, RngPurpose } from '../rng/philox.js';
import type { Tensor } from '../tensor.js';
import type { Objective, TokenBatch } from './objective.js';
import { type Schedule, type ScheduleName, makeSchedule } from './schedules.js';

export interface MdlmOptions {
  readonly maskId: number;
  readonly seed: number;
  readonly schedule: ScheduleName;
  readonly exponent?: number;
  readonly tMin: number;
  readonly tMax: number;
  readonly antithetic: boolean;
}

export class MdlmObjective implements Objective {
  readonly name = 'mdlm' as const;
  readonly causal = false;
  readonly schedule: Schedule;
  private buffers: { tokens: Tensor; maskProb: Tensor; lossWeight: Tensor; mask: Tensor } | null = null;

  constructor(readonly opts: MdlmOptions) {
    this.schedule = makeSchedule(opts.schedule, opts.exponent, opts.tMin);
  }

  /** Noise levels for the batch rows at `step`: antithetic (evenly spread, one random offset) or i.i.d. */
  noiseLevels(batch: number, step: number, rank: number): Float64Array {
    const rng = new PhiloxStream(this.opts.seed, RngPurpose.noiseLevel, step, rank);
    const { tMin, tMax, antithetic } = this.opts;
    const t = new Float64Array(batch);
    const offset = rng.uniform();
    for (let b = 0; b < batch; b++) {
      const u = antithetic ? (offset + b / batch) % 1 : rng.uniform();
      t[b] = tMin + (tMax - tMin) * u;
    }
    return t;
  }

  prepare(model: LlamaModel, batch: TokenBatch, step: number, rank: number, fixedT?: number): void {
    const tokens = batch.tokens;
    model.setBatch({ inputs: tokens, targets: tokens, segIds: batch.segIds, positions: batch.positions }, this.causal);
    const b = model.backend;
    const bufs = this.buffersFor(b, batch.batchSize, batch.seqLen);
    const t = fixedT === undefined ? this.noiseLevels(batch.batchSize, step, rank) : new Float64Array(batch.batchSize).fill(fixedT);
    b.upload(bufs.tokens, tokens);
    b.upload(bufs.maskProb, Float32Array.from(t, (x) => this.schedule.maskProb(x)));
    b.upload(bufs.lossWeight, Float32Array.from(t, (x) => this.schedule.weight(x)));
    const shape = [batch.batchSize, batch.seqLen];
    b.run(
      diffusionMask,
      { tokens: bufs.tokens, maskProb: bufs.maskProb, lossWeight: bufs.lossWeight, noised: b.view(model.ids, 0, shape), mask: bufs.mask, weights: b.view(model.weights, 0, shape) },
      { batch: batch.batchSize, seqLen: batch.seqLen, seed: this.opts.seed, step, rank, maskId: this.opts.maskId },
    );
  }

  private buffersFor(b: Backend, batch: number, seqLen: number) {
    if (!this.buffers) {
      this.buffers = {
        tokens: b.alloc([batch, seqLen], 'i32'),
        maskProb: b.alloc([batch], 'f32'),
        lossWeight: b.alloc([batch], 'f32'),
        mask: b.alloc([batch, seqLen], 'i32'),
      };
    }
    return this.buffers;
  }
}
