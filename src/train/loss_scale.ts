/**
 * Dynamic loss scaling for train.precision fp16. The loss gradient is multiplied by the scale S,
 * so gradients too small for f16 keep their values; the f32 gradients come out S times too large
 * and grad_norm divides them by S again on the device (AdamW.setLossScale), before clipping and
 * the update. A step whose gradients overflow (a non-finite norm or loss) is an overflow, not an
 * error: the device already skipped its update (adamw leaves everything alone on a non-finite
 * norm), and S halves for the next step. After growthInterval good steps in a row S doubles.
 * S stays a power of two, so scaling and unscaling are exact. The state is saved in the checkpoint,
 * so a resumed run goes on with the scale an uninterrupted one would have.
 */
import type { TrainConfig } from '../config/schema.js';
import { fail } from '../errors.js';

/** What a checkpoint keeps of the scaler (trainerState.lossScale). */
export interface LossScaleState {
  /** The scale the next step runs with. */
  readonly scale: number;
  /** Good steps in a row since the scale last changed. */
  readonly goodSteps: number;
  /** Overflowing steps in a row. */
  readonly overflows: number;
}

/** What one step did to the scale. */
export type LossScaleChange = 'backoff' | 'growth' | undefined;

export class LossScaler {
  private state: LossScaleState;

  constructor(private readonly opts: TrainConfig['train']['fp16']) {
    this.state = { scale: opts.initialScale, goodSteps: 0, overflows: 0 };
  }

  get scale(): number {
    return this.state.scale;
  }

  save(): LossScaleState {
    return { ...this.state };
  }

  /** Take over a saved state (a BAD_FILE error when it is not one). */
  restore(saved: unknown, where: string): void {
    const s = saved as Partial<LossScaleState> | null;
    const count = (v: unknown): v is number => Number.isInteger(v) && (v as number) >= 0;
    if (!(s && typeof s.scale === 'number' && s.scale >= 1 && Number.isInteger(Math.log2(s.scale)) && count(s.goodSteps) && count(s.overflows))) {
      fail('BAD_FILE', `${where}: the saved loss scale state ${JSON.stringify(saved)} is not one (expected a power-of-two scale >= 1 and counts of steps)`);
    }
    this.state = { scale: s.scale, goodSteps: s.goodSteps, overflows: s.overflows };
  }

  /**
   * Count a step that ran with the current scale: `finite` when its loss and gradient norm were.
   * An overflow halves the scale (a BAD_CONFIG error where it would fall below 1: the gradients
   * are not finite at any scale), growthInterval good steps in a row double it.
   */
  update(finite: boolean, step: number): LossScaleChange {
    const { scale, goodSteps, overflows } = this.state;
    if (!finite) {
      if (scale / 2 < 1) {
        fail('BAD_CONFIG', `the gradients overflowed in ${overflows + 1} steps in a row (through step ${step}), the loss scale backed off to 1 and they still overflow: they are not finite at any scale. Lower train.lr, check the data and the model's initialisation, or train in bf16 or f32`);
      }
      this.state = { scale: scale / 2, goodSteps: 0, overflows: overflows + 1 };
      return 'backoff';
    }
    if (goodSteps + 1 >= this.opts.growthInterval) {
      this.state = { scale: scale * 2, goodSteps: 0, overflows: 0 };
      return 'growth';
    }
    this.state = { scale, goodSteps: goodSteps + 1, overflows: 0 };
    return undefined;
  }
}
