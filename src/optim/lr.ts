/** Learning-rate schedules: linear warmup, then cosine decay, WSD (warmup-stable-decay) or constant. */
export type DecayKind = 'cosine' | 'wsd' | 'constant';

export interface LrSchedule {
  readonly lr: number;
  readonly minLr: number;
  readonly warmupSteps: number;
  readonly totalSteps: number;
  readonly decay: DecayKind;
  /** For WSD: the fraction of training spent in the final linear decay. */
  readonly wsdDecayFraction: number;
}

/** Learning rate at 0-based `step`. */
export function learningRate(s: LrSchedule, step: number): number {
  if (s.warmupSteps > 0 && step < s.warmupSteps) return (s.lr * (step + 1)) / s.warmupSteps;
  if (s.decay === 'constant') return s.lr;
  const span = Math.max(1, s.totalSteps - s.warmupSteps);
  const progress = Math.min(1, (step - s.warmupSteps) / span);
  if (s.decay === 'cosine') return s.minLr + 0.5 * (s.lr - s.minLr) * (1 + Math.cos(Math.PI * progress));
  const decayStart = 1 - s.wsdDecayFraction;
  if (progress < decayStart) return s.lr;
  return s.lr - (s.lr - s.minLr) * ((progress - decayStart) / Math.max(s.wsdDecayFraction, 1e-12));
}
