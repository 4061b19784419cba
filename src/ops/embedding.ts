/**
 * embedding: out[i, :] = table[ids[i], :], a zero row where ids[i] = −1 (no row: compact_rows
 * gathers and scatters rows with it). embedding_backward: the scatter-add
 * dtable[v, :] (+)= Σ_{i : ids[i] = v} dout[i, :], summed in a fixed order so the result is bitwise
 * the same on every run (the kernels sort positions by id, stably, to get there). With
 * `accumulate` and `outF32` it adds straight into the f32 master gradient of a bf16 model.
 */
import { fail } from '../errors.js';
import type { PhiloxStream } from '../rng/philox.js';
import { BF16_ROUNDED_OUTPUT, F16_ROUNDED_OUTPUT, defineOp, gradientOf, randint, randn, requireDims, requireFlags } from './op.js';

export interface EmbeddingAttrs {
  readonly tokens: number;
  readonly vocab: number;
  readonly dim: number;
}

export interface EmbeddingBackwardAttrs extends EmbeddingAttrs {
  /** dtable += the sums (else dtable = the sums). */
  readonly accumulate: boolean;
  /** dtable is f32 whatever dout is. */
  readonly outF32: boolean;
}

function validate(op: string, attrs: EmbeddingAttrs): void {
  requireDims(op, attrs, ['tokens', 'vocab', 'dim']);
}

/** The id at `pos` (−1: no row), checked against the vocabulary: a bad token id is a user error. */
function idAt(op: string, ids: ArrayLike<number>, pos: number, vocab: number): number {
  const v = ids[pos]!;
  if (!Number.isInteger(v) || v < -1 || v >= vocab) fail('BAD_ARGUMENT', `${op}: ids[${pos}] = ${v} is outside the vocabulary [0, ${vocab}) and not −1 (no row)`);
  return v;
}

/** Ids in [0, vocab), about one in twenty −1 (no row). */
function sampleIds(rng: PhiloxStream, tokens: number, vocab: number): Int32Array {
  return randint(rng, tokens, 0, vocab).map((v) => (rng.uniform() < 0.05 ? -1 : v));
}

const testCases = [
  // Fewer ids than tokens: many repeats; dims not multiples of anything.
  { label: 'tokens 300 vocab 37 dim 13', attrs: { tokens: 300, vocab: 37, dim: 13 } },
  // Vocab above 256: two radix passes in the backward sort; most rows unused.
  { label: 'tokens 700 vocab 1000 dim 5', attrs: { tokens: 700, vocab: 1000, dim: 5 } },
  { label: 'tokens 1 vocab 3 dim 1', attrs: { tokens: 1, vocab: 3, dim: 1 } },
  // Rows of ~1000 positions: the CUDA and WebGPU backwards sum a long row's full chunks first.
  { label: 'tokens 3000 vocab 3 dim 24', attrs: { tokens: 3000, vocab: 3, dim: 24 } },
];
const benchCases = [{ label: 'tokens 16384 vocab 50304 dim 768', attrs: { tokens: 16384, vocab: 50304, dim: 768 } }];
const plain = { accumulate: false, outF32: false };

export const embedding = defineOp<EmbeddingAttrs>({
  name: 'embedding',
  summary: 'out[i, :] = table[ids[i], :]',
  args: [
    { name: 'ids', role: 'in', dtype: 'i32' },
    { name: 'table', role: 'in', dtype: 'float' },
    { name: 'out', role: 'out', dtype: 'float' },
  ],
  floatDtypes: ['f32', 'bf16', 'f16'],
  validate: (attrs) => validate('embedding', attrs),
  shapes: ({ tokens, vocab, dim }) => ({ ids: [tokens], table: [vocab, dim], out: [tokens, dim] }),
  reference({ ids, table, out }, { tokens, vocab, dim }) {
    for (let i = 0; i < tokens; i++) {
      const v = idAt('embedding', ids!, i, vocab);
      for (let c = 0; c < dim; c++) out![i * dim + c] = v < 0 ? 0 : table![v * dim + c]!;
    }
  },
  cases: (scale) => (scale === 'test' ? testCases : benchCases),
  sample: (rng, { tokens, vocab, dim }) => ({ ids: sampleIds(rng, tokens, vocab), table: randn(rng, vocab * dim) }),
  // A copy: exact in every dtype.
  tolerance: { f32: 0, bf16: 0, f16: 0 },
});

export const embeddingBackward = defineOp<EmbeddingBackwardAttrs>({
  name: 'embedding_backward',
  summary: 'dtable[v, :] (+)= Σ_{i : ids[i] = v} dout[i, :] (deterministic scatter-add; accumulate, f32 dtable with outF32)',
  // dtable is read when accumulating, so it is declared inout.
  args: [
    { name: 'ids', role: 'in', dtype: 'i32' },
    { name: 'dout', role: 'in', dtype: 'float' },
    { name: 'dtable', role: 'inout', dtype: 'float' },
  ],
  floatDtypes: ['f32', 'bf16', 'f16'],
  validate: (attrs) => {
    validate('embedding_backward', attrs);
    requireFlags('embedding_backward', attrs, ['accumulate', 'outF32']);
  },
  shapes: ({ tokens, vocab, dim }) => ({ ids: [tokens], dout: [tokens, dim], dtable: [vocab, dim] }),
  argDtype: (arg, { outF32 }) => (arg === 'dtable' && outF32 ? 'f32' : undefined),
  reference({ ids, dout, dtable }, { tokens, vocab, dim, accumulate }) {
    if (!accumulate) dtable!.fill(0);
    for (let i = 0; i < tokens; i++) {
      const v = idAt('embedding_backward', ids!, i, vocab);
      if (v < 0) continue;
      for (let c = 0; c < dim; c++) dtable![v * dim + c] += dout![i * dim + c]!;
    }
  },
  cases: (scale) =>
    scale === 'test'
      ? [
          ...testCases.map((c) => ({ ...c, attrs: { ...c.attrs, ...plain } })),
          { label: 'f32 dtable += tokens 300 vocab 37 dim 16', attrs: { tokens: 300, vocab: 37, dim: 16, accumulate: true, outF32: true } },
          // a bf16 model's first gradient write of a step (ParamStore.beginGradients): rows no id names become 0
          { label: 'f32 dtable = tokens 30 vocab 77 dim 16', attrs: { tokens: 30, vocab: 77, dim: 16, accumulate: false, outF32: true } },
          { label: 'dtable += tokens 70 vocab 300 dim 5', attrs: { tokens: 70, vocab: 300, dim: 5, accumulate: true, outF32: false } },
          // two radix passes over 36 sort tiles: 9216 counts, more than a round of CUDA's scan (8192)
          { label: 'tokens 9000 vocab 700 dim 3', attrs: { tokens: 9000, vocab: 700, dim: 3, ...plain } },
        ]
      : [
          ...benchCases.map((c) => ({ ...c, attrs: { ...c.attrs, ...plain } })),
          { label: 'f32 dtable += tokens 16384 vocab 50304 dim 768', attrs: { ...benchCases[0]!.attrs, accumulate: true, outF32: true } },
        ],
  sample: (rng, { tokens, vocab, dim }) => ({
    ids: sampleIds(rng, tokens, vocab),
    dout: randn(rng, tokens * dim),
    dtable: randn(rng, vocab * dim),
    // Not an argument: the forward input the gradient check perturbs (the backward never reads it).
    table: randn(rng, vocab * dim),
  }),
  // Sums of a handful of f32 terms per row (one more when accumulating); bf16: summed in f32, one
  // rounding to bf16 (none with an f32 dtable).
  tolerance: { f32: 1e-6, bf16: BF16_ROUNDED_OUTPUT, f16: F16_ROUNDED_OUTPUT },
  flops: ({ tokens, dim }) => tokens * dim,
  gradient: gradientOf({
    forward: embedding,
    forwardAttrs: ({ tokens, vocab, dim }: EmbeddingBackwardAttrs) => ({ tokens, vocab, dim }),
    // The finite differences check the sums; accumulation is checked against the reference.
    checkAttrs: (attrs: EmbeddingBackwardAttrs) => ({ ...attrs, accumulate: false }),
    inputs: { ids: 'ids', table: 'table' },
    cotangents: { out: 'dout' },
    grads: { dtable: 'table' },
  }),
});
