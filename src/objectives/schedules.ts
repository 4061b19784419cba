/**
 * Masking schedules of absorbing-state diffusion: α(t) is the probability a token is still clean
 * at noise level t ∈ (0, 1]; a token is masked with probability 1 − α(t); the ELBO weight of the
 * masked cross-entropy is w(t) = −α'(t) / (1 − α(t)).
 */
import { fail } from '../errors.js';

export type ScheduleName = 'linear' | 'cosine' | 'polynomial' | 'loglinear';

export interface Schedule {
  /** Probability that a token is masked at noise level t: 1 − α(t). */
  maskProb(t: number): number;
  /** ELBO weight w(t) = −α'(t) / (1 − α(t)). */
  weight(t: number): number;
}

export function makeSchedule(name: ScheduleName, exponent = 2, eps = 1e-3): Schedule {
  switch (name) {
    case 'linear':
      return { maskProb: (t) => t, weight: (t) => 1 / t };
    case 'polynomial':
      // α = 1 − t^k: mask probability t^k, weight k t^(k−1) / t^k = k / t.
      return { maskProb: (t) => t ** exponent, weight: (t) => exponent / t };
    case 'cosine':
      // α = cos(πt/2): weight (π/2) sin(πt/2) / (1 − cos(πt/2)).
      return {
        maskProb: (t) => 1 - Math.cos((Math.PI / 2) * t),
        weight: (t) => ((Math.PI / 2) * Math.sin((Math.PI / 2) * t)) / (1 - Math.cos((Math.PI / 2) * t)),
      };
    case 'loglinear':
      // MDLM's log-linear noise σ(t) = −log(1 − (1 − ε)t): α = 1 − (1 − ε)t, weight 1/t.
      return { maskProb: (t) => (1 - eps) * t, weight: (t) => 1 / t };
    default:
      return fail('BAD_CONFIG', `objective.schedule: unknown schedule '${String(name)}'; expected linear, cosine, polynomial or loglinear`);
  }
}
