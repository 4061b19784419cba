/**
 * cross_entropy: softmax cross-entropy over the vocabulary, fused, with a per-token weight and
 * an ignore mask. Per row: lse = log Σ_j exp(logits_j), loss = weight · (lse − logits[target]),
 * 0 where target < 0 (ignored). The mdlm objective weights masked positions by w(t) and gives
 * the others weight 0 (or target −1); the ar objective uses weight 1 (or 1/N).
 * cross_entropy_backward: dlogits = dloss · weight · (softmax(logits) − onehot(target)), 0 rows
 * where ignored; it takes the forward's lse so the softmax is one exp per element. dlogits may be
 * the logits tensor itself (in place: the model keeps one [tokens, vocab] buffer, not two).
 * cross_entropy_fused: both in one, for a training step whose loss gradient dloss is known before
 * the forward: loss and lse as cross_entropy, dlogits as cross_entropy_backward from that lse. A
 * kernel can then read each row of logits once from memory (the second pass over a row finds it
 * in cache) instead of twice.
 *
 * lse is f32 whatever the float dtype: the backward subtracts it from every logit before the exp,
 * and a bf16 lse (~11 ± 0.03) would skew every softmax entry of the row by up to 3%. The per-row
 * weights, losses and loss gradients are f32 too: a bf16 w(t) = 1/t would be off by up to 0.4%,
 * and the reported loss would carry three significant digits; they are one value per row.
 *
 * Targets ≥ vocab are a data error: the reference throws. The kernels cannot throw and never read
 * out of bounds: the WGSL kernels treat such rows as ignored; the CUDA kernels write a NaN loss
 * and a NaN dlogits row, so the step's loss cannot pass for a good one. The data loader
 * validates token ids.
 */
import { fail } from '../errors.js';
import { BF16_ROUNDED_OUTPUT, F16_ROUNDED_OUTPUT, type RefArray, defineOp, gradientOf, randn, randu, requireDims } from './op.js';
import type { PhiloxStream } from '../rng/philox.js';

export interface CrossEntropyAttrs {
  readonly rows: number;
  readonly vocab: number;
}

/** The row's target, or -1 if it is ignored; throws on a target ≥ vocab. */
function targetOf(op: string, targets: RefArray, row: number, vocab: number): number {
  const t = targets[row]!;
  if (t >= vocab) {
    fail('BAD_ARGUMENT', `${op}: argument 'targets' row ${row} is ${t}, not below vocab ${vocab} (negative targets mark ignored positions)`);
  }
  return t < 0 ? -1 : t;
}

function logSumExp(logits: RefArray, start: number, vocab: number): number {
  let m = -Infinity;
  for (let j = 0; j < vocab; j++) m = Math.max(m, logits[start + j]!);
  let s = 0;
  for (let j = 0; j < vocab; j++) s += Math.exp(logits[start + j]! - m);
  return m + Math.log(s);
}

/** Row r of cross_entropy: its lse and loss. */
function lossRow(op: string, { logits, targets, weights, loss, lse }: Record<string, RefArray | undefined>, r: number, vocab: number): void {
  const t = targetOf(op, targets!, r, vocab);
  const l = logSumExp(logits!, r * vocab, vocab);
  lse![r] = l;
  loss![r] = t < 0 ? 0 : weights![r]! * (l - logits![r * vocab + t]!);
}

/** Row r of cross_entropy_backward, from the row's lse; reads each logit before writing its gradient (in place). */
function gradientRow(op: string, { logits, targets, weights, lse, dloss, dlogits }: Record<string, RefArray | undefined>, r: number, vocab: number): void {
  const t = targetOf(op, targets!, r, vocab);
  const scale = t < 0 ? 0 : dloss![r]! * weights![r]!;
  for (let j = 0; j < vocab; j++) {
    const i = r * vocab + j;
    dlogits![i] = scale * (Math.exp(logits![i]! - lse![r]!) - (j === t ? 1 : 0));
  }
}

const validate = (op: string) => (attrs: CrossEntropyAttrs) => requireDims(op, attrs, ['rows', 'vocab']);

const BENCH_CASES = [
  { label: '8192x50304', attrs: { rows: 8192, vocab: 50304 } },
  { label: '8192x50257 (unaligned rows)', attrs: { rows: 8192, vocab: 50257 } },
];

// Fewer than 4 logits in all is tested with fixed inputs in tests/ops/cross_entropy.test.ts: on
// one random row the loss can be tiny (a confident target), and f32 log(s) for s near 1 keeps
// only an absolute error of ~1e-7, which a relative-error check would flag.
function forwardCases(scale: 'test' | 'bench') {
  return scale === 'test'
    ? [
        { label: '37x257', attrs: { rows: 37, vocab: 257 } },
        { label: '13x1003', attrs: { rows: 13, vocab: 1003 } },
        { label: '9x1024 (aligned rows)', attrs: { rows: 9, vocab: 1024 } },
        { label: '3x50257 (gpt-2 vocab)', attrs: { rows: 3, vocab: 50257 } },
        { label: '5x3 (rows shorter than a vec4)', attrs: { rows: 5, vocab: 3 } },
      ]
    : BENCH_CASES;
}

/**
 * The backward has no row reduction, so long rows add nothing; and the finite-difference check
 * perturbs one logit of a loss summed over all rows, whose float64 rounding (~eps·rows·vocab
 * relative to a softmax entry) must stay well under its 1e-5 tolerance: small rows × vocab.
 */
function backwardCases(scale: 'test' | 'bench') {
  return scale === 'test'
    ? [
        { label: '7x257 (tail of 3)', attrs: { rows: 7, vocab: 257 } },
        { label: '5x1003 (tail of 3)', attrs: { rows: 5, vocab: 1003 } },
        { label: '4x1024 (aligned rows)', attrs: { rows: 4, vocab: 1024 } },
        // More rows than twice an H100's or H200's 132 SMs: more blocks than CUDA's fused kernel
        // (a block a row, two an SM) holds at once, so some start only as others finish.
        { label: '300x1024 (aligned rows, more than two a Hopper SM)', attrs: { rows: 300, vocab: 1024 } },
        { label: '9x3 (vec4s straddle rows)', attrs: { rows: 9, vocab: 3 } },
        { label: '1x3 (tail only)', attrs: { rows: 1, vocab: 3 } },
      ]
    : BENCH_CASES;
}

/** Spread of sampled logits (std): softmaxes peaked as in training. */
const LOGIT_SCALE = 2;

/** Random inputs shared by both ops: ~20% ignored rows, ~15% zero weights. */
function sampleInputs(rng: PhiloxStream, { rows, vocab }: CrossEntropyAttrs) {
  const targets = new Int32Array(rows);
  const weights = randu(rng, rows, 0.1, 2);
  for (let r = 0; r < rows; r++) {
    const u = rng.uniform();
    targets[r] = u < 0.1 ? -1 : u < 0.2 ? -100 : rng.int(vocab);
    if (rng.uniform() < 0.15) weights[r] = 0;
  }
  return { logits: randn(rng, rows * vocab, LOGIT_SCALE), targets, weights };
}

export const crossEntropy = defineOp<CrossEntropyAttrs>({
  name: 'cross_entropy',
  summary: 'loss = weight * (logsumexp(logits) - logits[target]) per row, 0 where target < 0; also lse',
  args: [
    { name: 'logits', role: 'in', dtype: 'float' },
    { name: 'targets', role: 'in', dtype: 'i32' },
    { name: 'weights', role: 'in', dtype: 'f32' },
    { name: 'loss', role: 'out', dtype: 'f32' },
    { name: 'lse', role: 'out', dtype: 'f32' },
  ],
  floatDtypes: ['f32', 'bf16', 'f16'],
  validate: validate('cross_entropy'),
  shapes: ({ rows, vocab }) => ({ logits: [rows, vocab], targets: [rows], weights: [rows], loss: [rows], lse: [rows] }),
  reference(args, { rows, vocab }) {
    for (let r = 0; r < rows; r++) lossRow('cross_entropy', args, r, vocab);
  },
  cases: forwardCases,
  sample: sampleInputs,
  // A sum of `vocab` exps per row (f32, tree-reduced), then a log.
  tolerance: { f32: 1e-5, bf16: BF16_ROUNDED_OUTPUT, f16: F16_ROUNDED_OUTPUT },
});

/** dlogits against finite differences of cross_entropy's loss, for both gradient ops. */
const lossGradient = gradientOf({
  forward: crossEntropy,
  forwardAttrs: (a: CrossEntropyAttrs) => a,
  inputs: { logits: 'logits', targets: 'targets', weights: 'weights' },
  cotangents: { loss: 'dloss' },
  grads: { dlogits: 'logits' },
});

export const crossEntropyBackward = defineOp<CrossEntropyAttrs>({
  name: 'cross_entropy_backward',
  summary: 'dlogits = dloss * weight * (softmax(logits) - onehot(target)), 0 rows where target < 0',
  args: [
    { name: 'logits', role: 'in', dtype: 'float' },
    { name: 'targets', role: 'in', dtype: 'i32' },
    { name: 'weights', role: 'in', dtype: 'f32' },
    { name: 'lse', role: 'in', dtype: 'f32' },
    { name: 'dloss', role: 'in', dtype: 'f32' },
    { name: 'dlogits', role: 'out', dtype: 'float' },
  ],
  floatDtypes: ['f32', 'bf16', 'f16'],
  inPlace: { dlogits: 'logits' },
  validate: validate('cross_entropy_backward'),
  shapes: ({ rows, vocab }) => ({
    logits: [rows, vocab], targets: [rows], weights: [rows], lse: [rows], dloss: [rows], dlogits: [rows, vocab],
  }),
  reference(args, { rows, vocab }) {
    for (let r = 0; r < rows; r++) gradientRow('cross_entropy_backward', args, r, vocab);
  },
  cases: backwardCases,
  sample(rng, attrs) {
    const inputs = sampleInputs(rng, attrs);
    const saved = { ...inputs, loss: new Float64Array(attrs.rows), lse: new Float64Array(attrs.rows) };
    crossEntropy.reference(saved, attrs);
    return { ...inputs, lse: saved.lse, dloss: randn(rng, attrs.rows) };
  },
  // One exp per element against a given lse.
  tolerance: { f32: 1e-5, bf16: BF16_ROUNDED_OUTPUT, f16: F16_ROUNDED_OUTPUT },
  gradient: lossGradient,
});

export const crossEntropyFused = defineOp<CrossEntropyAttrs>({
  name: 'cross_entropy_fused',
  summary: 'cross_entropy then cross_entropy_backward from its lse, in one: loss, lse and dlogits (which may be the logits)',
  args: [
    { name: 'logits', role: 'in', dtype: 'float' },
    { name: 'targets', role: 'in', dtype: 'i32' },
    { name: 'weights', role: 'in', dtype: 'f32' },
    { name: 'dloss', role: 'in', dtype: 'f32' },
    { name: 'loss', role: 'out', dtype: 'f32' },
    { name: 'lse', role: 'out', dtype: 'f32' },
    { name: 'dlogits', role: 'out', dtype: 'float' },
  ],
  floatDtypes: ['f32', 'bf16', 'f16'],
  inPlace: { dlogits: 'logits' },
  validate: validate('cross_entropy_fused'),
  shapes: ({ rows, vocab }) => ({
    logits: [rows, vocab], targets: [rows], weights: [rows], dloss: [rows], loss: [rows], lse: [rows], dlogits: [rows, vocab],
  }),
  // Row by row, the row's loss and lse before its gradient: correct in place too.
  reference(args, { rows, vocab }) {
    for (let r = 0; r < rows; r++) {
      lossRow('cross_entropy_fused', args, r, vocab);
      gradientRow('cross_entropy_fused', args, r, vocab);
    }
  },
  // Not the one-row 1x3: like the forward's cases (forwardCases), its lse may land near 0 where f32
  // m + log s keeps only an absolute error (WebGPU: a relative 1e-4 at 3 of 600 seeds); 9x3 takes
  // the scalar tail.
  cases: (scale) => backwardCases(scale).filter((c) => c.attrs.rows > 1),
  sample(rng, attrs) {
    return { ...sampleInputs(rng, attrs), dloss: randn(rng, attrs.rows) };
  },
  // The forward's row sums, then one exp per element against them.
  tolerance: { f32: 1e-5, bf16: BF16_ROUNDED_OUTPUT, f16: F16_ROUNDED_OUTPUT },
  gradient: lossGradient,
});
