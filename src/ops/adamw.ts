/**
 * adamw: one fused AdamW step over flat fp32 buffers (Loshchilov & Hutter, decoupled weight
 * decay, PyTorch's formulation). The gradient is multiplied by clip[1] first: `clip` is
 * grad_norm's output [norm, scale], left on the device, so clipping needs no host round-trip.
 * A non-finite norm (clip[0] NaN or ±Inf) makes the step the identity: param, m and v keep their
 * values. So a step with overflowed gradients is skipped on the device, and the host can queue
 * the update without waiting to read the norm first.
 * adamw_cast: the same step, the updated values also stored into `work` in the compute dtype
 * (mixed precision's working copy), so no separate cast pass reads the masters again.
 */
import type { PhiloxStream } from '../rng/philox.js';
import { type ArgSpec, BF16_ROUNDED_OUTPUT, F16_ROUNDED_OUTPUT, type RefArgs, badAttr, defineOp, randn, randu, requireDims } from './op.js';

export interface AdamwAttrs {
  readonly n: number;
  readonly beta1: number;
  readonly beta2: number;
  readonly eps: number;
  readonly weightDecay: number;
  /** Sampling only: the learning rate and 1-based step that parity inputs' `sched` is computed from. */
  readonly sampledLr?: number;
  readonly sampledStep?: number;
  /** Sampling only: inputs for parity checks get this non-finite norm in clip[0] (a skipped step). */
  readonly sampledNorm?: number;
}

/**
 * adamw's `sched` for learning rate `lr` at 1-based `step`: [lr, lr / (1 − β1^step),
 * 1 / √(1 − β2^step)], computed in float64 and stored as f32.
 */
export function adamwSchedule(lr: number, step: number, beta1: number, beta2: number): Float32Array {
  if (!(Number.isFinite(lr) && lr >= 0)) badAttr('adamw', 'lr', lr, 'expected a finite number >= 0');
  if (!(Number.isInteger(step) && step >= 1)) badAttr('adamw', 'step', step, 'expected an integer >= 1 (the 1-based step)');
  return Float32Array.of(lr, lr / (1 - beta1 ** step), 1 / Math.sqrt(1 - beta2 ** step));
}

function checkUnit(op: string, attrs: AdamwAttrs, key: 'beta1' | 'beta2'): void {
  const v = attrs[key];
  if (!(v >= 0 && v < 1)) badAttr(op, key, v, 'expected a number in [0, 1)');
}

const ARGS: readonly ArgSpec[] = [
  { name: 'param', role: 'inout', dtype: 'f32' },
  { name: 'grad', role: 'in', dtype: 'f32' },
  { name: 'm', role: 'inout', dtype: 'f32' },
  { name: 'v', role: 'inout', dtype: 'f32' },
  { name: 'clip', role: 'in', dtype: 'f32' },
  { name: 'sched', role: 'in', dtype: 'f32' },
];

function validate(op: string) {
  return (attrs: AdamwAttrs): void => {
    requireDims(op, attrs, ['n']);
    checkUnit(op, attrs, 'beta1');
    checkUnit(op, attrs, 'beta2');
    if (!(Number.isFinite(attrs.weightDecay) && attrs.weightDecay >= 0)) badAttr(op, 'weightDecay', attrs.weightDecay, 'expected a finite number >= 0');
    // eps > 0 keeps the update finite where v = 0.
    if (!(Number.isFinite(attrs.eps) && attrs.eps > 0)) badAttr(op, 'eps', attrs.eps, 'expected a finite number > 0');
  };
}

/** The step in float64 from sched's f32 scalars, in place on param, m and v. */
function adamwStep({ param, grad, m, v, clip, sched }: RefArgs, attrs: AdamwAttrs): void {
  if (!Number.isFinite(clip![0]!)) return;
  const { beta1, beta2, eps, weightDecay } = attrs;
  const [lr, stepSize, invSqrtBc2] = [sched![0]!, sched![1]!, sched![2]!];
  for (let i = 0; i < param!.length; i++) {
    const g = grad![i]! * clip![1]!;
    m![i] = beta1 * m![i]! + (1 - beta1) * g;
    v![i] = beta2 * v![i]! + (1 - beta2) * g * g;
    param![i] = (1 - lr * weightDecay) * param![i]! - (stepSize * m![i]!) / (Math.sqrt(v![i]!) * invSqrtBc2 + eps);
  }
}

function cases(s: 'test' | 'bench') {
  const base = { sampledLr: 1e-2, beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1 };
  return s === 'test'
    ? [
        { label: 'n%4=3 step 1', attrs: { ...base, n: 1027, sampledStep: 1 } },
        // n = 18 ends in a half-used vec4. Not fewer elements: with n = 2 the norm-wise error of m
        // has no averaging, and cancellation in β1·m + (1 − β1)·g put ~0.1% of random draws
        // above 1e-6 (simulated; n = 18 stays below 2e-7 in 200k draws).
        { label: 'n=18 step 7 no decay', attrs: { ...base, n: 18, sampledStep: 7, weightDecay: 0 } },
        { label: 'n%4=0 step 1000', attrs: { ...base, n: 4096, sampledStep: 1000, beta2: 0.999 } },
        { label: 'n%4=3 NaN norm: no step', attrs: { ...base, n: 1027, sampledStep: 3, sampledNorm: NaN } },
        { label: 'n%4=3 infinite norm: no step', attrs: { ...base, n: 1027, sampledStep: 3, sampledNorm: Infinity } },
      ]
    : [{ label: '134M', attrs: { ...base, n: 1 << 27, sampledLr: 3e-4, sampledStep: 100 } }];
}

function sample(rng: PhiloxStream, { n, beta1, beta2, sampledLr = 1e-2, sampledStep = 1, sampledNorm }: AdamwAttrs) {
  const args = {
    param: randn(rng, n), grad: randn(rng, n, 0.1), m: randn(rng, n, 0.01), v: randu(rng, n, 0, 1e-3), clip: randu(rng, 2, 0.25, 1),
    sched: Float64Array.from(adamwSchedule(sampledLr, sampledStep, beta1, beta2)),
  };
  if (sampledNorm !== undefined) args.clip[0] = sampledNorm;
  return args;
}

export const adamw = defineOp<AdamwAttrs>({
  name: 'adamw',
  summary: 'fused AdamW step: m, v moments, bias correction, decoupled weight decay, grad scale',
  args: ARGS,
  validate: validate('adamw'),
  shapes: ({ n }) => ({ param: [n], grad: [n], m: [n], v: [n], clip: [2], sched: [3] }),
  reference: adamwStep,
  cases,
  sample,
  // f32 state and arithmetic against float64; each output is one short expression per element.
  tolerance: { f32: 1e-6 },
  flops: ({ n }) => 14 * n,
});

export const adamwCast = defineOp<AdamwAttrs>({
  name: 'adamw_cast',
  summary: 'adamw, the updated parameters also stored in the compute dtype (the working copy)',
  args: [...ARGS, { name: 'work', role: 'out', dtype: 'float' }],
  floatDtypes: ['f32', 'bf16', 'f16'],
  validate: validate('adamw_cast'),
  shapes: ({ n }) => ({ param: [n], grad: [n], m: [n], v: [n], clip: [2], sched: [3], work: [n] }),
  reference(args, attrs) {
    adamwStep(args, attrs);
    // From the f32 parameters, as a cast of the stored masters would: one rounding to f32, then
    // one to the working dtype (not straight from float64, which can differ at a tie).
    const { param, work } = args;
    for (let i = 0; i < param!.length; i++) work![i] = Math.fround(param![i]!);
  },
  cases,
  sample,
  tolerance: { f32: 1e-6, bf16: BF16_ROUNDED_OUTPUT, f16: F16_ROUNDED_OUTPUT },
  flops: ({ n }) => 14 * n,
});
