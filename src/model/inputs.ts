/**
 * What a model reads from each batch, on the device: token ids, targets, per-token loss weights,
 * documents (segment ids) and positions, [batch·seqLen] each, all set by one call from one host
 * batch. A masked-diffusion batch carries its noise instead of its ids and weights: the model
 * draws the masks on the device (diffusion_mask, Philox-keyed, so every backend masks the same
 * tokens) from the targets, the clean tokens, with no read-back.
 */
import { fail } from '../errors.js';
import type { Arena } from '../nn/arena.js';
import { diffusionMask } from '../ops/diffusion_mask.js';
import type { Tensor } from '../tensor.js';

/** The forward process of masked diffusion for one batch: per row a mask probability and a loss weight. */
export interface InputMasking {
  /** Per row: the probability that a token is masked (1 − α(t)). */
  readonly maskProb: Float32Array;
  /** Per row: a masked token's loss weight (unmasked tokens weigh 0). */
  readonly lossWeight: Float32Array;
  /** The id of a masked token, and of padding (a negative target), which the embedding reads too. */
  readonly maskId: number;
  /** Scale a masked token's weight by its row's real tokens over its masked ones (MegaDLMs' weighting). */
  readonly empirical: boolean;
  /** The Philox key of the draws. */
  readonly seed: number;
  readonly step: number;
  /** The batch's rows are rows rowOffset.. of a global batch of totalRows (diffusion_mask keys its draws by the global row). */
  readonly rowOffset: number;
  readonly totalRows: number;
}

/** Rows every batch gives (host arrays of batch·seqLen entries). */
interface BatchRows {
  /** Negative: no target (out of the loss; under masking, padding). */
  readonly targets: Int32Array;
  readonly segIds: Int32Array;
  readonly positions: Int32Array;
}

/** A batch with its input ids, and its loss weights (default: 1 each). */
export interface GivenBatch extends BatchRows {
  readonly inputs: Int32Array;
  readonly weights?: Float32Array;
  readonly masking?: undefined;
}

/** A batch whose input ids and loss weights the model draws from its targets (masked diffusion). */
export interface MaskedBatch extends BatchRows {
  readonly masking: InputMasking;
  /**
   * The ids the model reads where a target is negative (never masked, out of the loss): the
   * prompt under supervised fine-tuning. Default: the mask id there (padding).
   */
  readonly visible?: Int32Array;
  readonly inputs?: undefined;
  readonly weights?: undefined;
}

export type ModelBatch = GivenBatch | MaskedBatch;

export class ModelInputs {
  readonly ids: Tensor;
  readonly targets: Tensor;
  readonly weights: Tensor;
  readonly segIds: Tensor;
  readonly positions: Tensor;
  /** Masking's per-row inputs and its mask (which the model does not read). */
  private readonly maskProb: Tensor;
  private readonly lossWeight: Tensor;
  private readonly mask: Tensor;
  private ones: Float32Array | undefined;

  constructor(private readonly arena: Arena, readonly batch: number, readonly seqLen: number) {
    const N = batch * seqLen;
    this.ids = arena.alloc([N], 'i32');
    this.targets = arena.alloc([N], 'i32');
    this.weights = arena.alloc([N], 'f32');
    this.segIds = arena.alloc([batch, seqLen], 'i32');
    this.positions = arena.alloc([batch, seqLen], 'i32');
    this.maskProb = arena.alloc([batch], 'f32');
    this.lossWeight = arena.alloc([batch], 'f32');
    this.mask = arena.alloc([batch, seqLen], 'i32');
  }

  /** Upload a batch (and under masking, draw its ids and weights). */
  set(batch: ModelBatch): void {
    const b = this.arena.backend;
    const n = this.batch * this.seqLen;
    const rows: [string, Int32Array | Float32Array | undefined][] = [
      ['inputs', batch.inputs], ['targets', batch.targets], ['segIds', batch.segIds], ['positions', batch.positions], ['weights', batch.weights],
    ];
    for (const [name, arr] of rows) {
      if (arr && arr.length !== n) fail('BAD_SHAPE', `model batch: '${name}' has ${arr.length} entries, expected batch·seqLen = ${n}`);
    }
    b.upload(this.targets, batch.targets);
    b.upload(this.segIds, batch.segIds);
    b.upload(this.positions, batch.positions);
    if (batch.masking) return this.draw(batch.masking, batch.targets, batch.visible);
    b.upload(this.ids, batch.inputs);
    b.upload(this.weights, batch.weights ?? (this.ones ??= new Float32Array(n).fill(1)));
  }

  /** ids and weights from the targets under `m`; where a target is negative the id is `visible`'s, else the mask id. */
  private draw(m: InputMasking, targets: Int32Array, visible: Int32Array | undefined): void {
    const b = this.arena.backend;
    const B = this.batch, T = this.seqLen;
    for (const [name, arr] of [['maskProb', m.maskProb], ['lossWeight', m.lossWeight]] as const) {
      if (arr.length !== B) fail('BAD_SHAPE', `model batch: masking's '${name}' has ${arr.length} entries, expected one per row (${B})`);
    }
    if (visible && visible.length !== B * T) fail('BAD_SHAPE', `model batch: 'visible' has ${visible.length} entries, expected batch·seqLen = ${B * T}`);
    b.upload(this.maskProb, m.maskProb);
    b.upload(this.lossWeight, m.lossWeight);
    const shape = [B, T];
    b.run(
      diffusionMask,
      { tokens: b.view(this.targets, 0, shape), maskProb: this.maskProb, lossWeight: this.lossWeight, noised: b.view(this.ids, 0, shape), mask: this.mask, weights: b.view(this.weights, 0, shape) },
      // The rank word stays 0: keyed by the global row, the masks are the same whatever the world size.
      { batch: B, seqLen: T, rowOffset: m.rowOffset, totalRows: m.totalRows, seed: m.seed, step: m.step, rank: 0, maskId: m.maskId, empirical: m.empirical },
    );
    // The kernel copies a negative target (−1) through; the embedding needs a real id there.
    for (let i = 0; i < targets.length;) {
      if (targets[i]! >= 0) {
        i++;
        continue;
      }
      let end = i + 1;
      while (end < targets.length && targets[end]! < 0) end++;
      b.upload(b.view(this.ids, i, [end - i]), visible ? visible.slice(i, end) : new Int32Array(end - i).fill(m.maskId));
      i = end;
    }
  }

  /** The ids, targets and weights on the device (waits for it). */
  async download(): Promise<{ ids: Int32Array; targets: Int32Array; weights: Float32Array }> {
    const b = this.arena.backend;
    return { ids: (await b.download(this.ids)) as Int32Array, targets: (await b.download(this.targets)) as Int32Array, weights: (await b.download(this.weights)) as Float32Array };
  }
}
