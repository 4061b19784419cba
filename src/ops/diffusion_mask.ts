/**
 * diffusion_mask: the forward process of masked (absorbing-state) diffusion. The call's rows are
 * rows rowOffset .. rowOffset + batch − 1 of a global batch of totalRows rows (data parallelism:
 * each rank masks its own rows; one process: rowOffset 0, totalRows = batch), and the draws are
 * keyed by the global row g = rowOffset + b, so the masks do not depend on how the global batch is
 * split. Each non-padding token (b, i) is replaced by maskId with probability maskProb[b] =
 * 1 − α(t_b), drawn from Philox at counter [g·T + i, step, rank, RngPurpose.mask]; a row left with
 * no masked token gets one at its j-th non-padding position, j from the draw at counter
 * [totalRows·T + g, ...], so every sequence contributes to the loss. Masked tokens carry the
 * sequence's loss weight w(t_b); with `empirical` (MegaDLMs' weighting) that weight times real /
 * masked, the row's non-padding tokens over its masked ones (1/p for the realised masked fraction
 * p), computed in the same kernel that counts them, so the objective needs no read-back.
 */
import { fail } from '../errors.js';
import { RngPurpose, philox4x32, seedKey, uniform01 } from '../rng/philox.js';
import { badAttr, defineOp, randu, requireDims, requireFlags, requireSeed, requireU32 } from './op.js';

export interface DiffusionMaskAttrs {
  readonly batch: number;
  readonly seqLen: number;
  /** The global row of the call's first row. */
  readonly rowOffset: number;
  /** Rows of the global batch (at least rowOffset + batch). */
  readonly totalRows: number;
  readonly seed: number;
  readonly step: number;
  readonly rank: number;
  /** Token id written at masked positions. */
  readonly maskId: number;
  /** Scale masked tokens' weights by real / masked tokens of their row. */
  readonly empirical: boolean;
}

/** The empirical factor as the kernels compute it: f32 quotient of two exact integer counts, times w in f32. */
function empiricalWeight(weight: number, real: number, masked: number): number {
  return Math.fround(Math.fround(weight) * Math.fround(real / masked));
}

/** Word 0 of the mask-purpose Philox block at counter index `index`. */
function maskDraw(index: number, key: readonly [number, number], step: number, rank: number, block: Uint32Array): number {
  philox4x32([index, step, rank, RngPurpose.mask], key, block);
  return block[0]!;
}

export const diffusionMask = defineOp<DiffusionMaskAttrs>({
  name: 'diffusion_mask',
  summary: 'noised = tokens with each masked w.p. maskProb[b] (at least one per row); mask, weights = lossWeight[b] on masked',
  args: [
    { name: 'tokens', role: 'in', dtype: 'i32' },
    { name: 'maskProb', role: 'in', dtype: 'f32' },
    { name: 'lossWeight', role: 'in', dtype: 'f32' },
    { name: 'noised', role: 'out', dtype: 'i32' },
    { name: 'mask', role: 'out', dtype: 'i32' },
    { name: 'weights', role: 'out', dtype: 'f32' },
  ],
  validate(attrs) {
    requireDims('diffusion_mask', attrs, ['batch', 'seqLen']);
    requireSeed('diffusion_mask', attrs.seed);
    requireU32('diffusion_mask', attrs, ['step', 'rank', 'rowOffset', 'totalRows']);
    const { batch, seqLen, maskId, rowOffset, totalRows } = attrs;
    if (!Number.isInteger(maskId) || maskId < 0 || maskId > 0x7fffffff) badAttr('diffusion_mask', 'maskId', maskId, 'expected a non-negative i32 token id');
    if (rowOffset + batch > totalRows) badAttr('diffusion_mask', 'totalRows', totalRows, `expected at least rowOffset + batch = ${rowOffset + batch}`);
    // Counter word 0 indexes the global batch's R·T token draws and then its R fallback draws.
    if (totalRows * seqLen + totalRows > 0x100000000) badAttr('diffusion_mask', 'totalRows', totalRows, `totalRows·(seqLen + 1) must be at most 2^32 (seqLen ${seqLen})`);
    requireFlags('diffusion_mask', attrs, ['empirical']);
  },
  shapes: ({ batch, seqLen }) => ({
    tokens: [batch, seqLen],
    maskProb: [batch],
    lossWeight: [batch],
    noised: [batch, seqLen],
    mask: [batch, seqLen],
    weights: [batch, seqLen],
  }),
  reference({ tokens, maskProb, lossWeight, noised, mask, weights }, { batch, seqLen, rowOffset, totalRows, seed, step, rank, maskId, empirical }) {
    const key = seedKey(seed);
    const block = new Uint32Array(4);
    for (let b = 0; b < batch; b++) {
      const row = b * seqLen;
      const draws = (rowOffset + b) * seqLen;
      const p = maskProb![b]!;
      if (!(p >= 0 && p <= 1)) fail('BAD_ARGUMENT', `diffusion_mask: maskProb[${b}] is ${p}; expected a probability in [0, 1]`);
      let masked = 0;
      const real: number[] = [];
      for (let i = 0; i < seqLen; i++) {
        const tok = tokens![row + i]!;
        noised![row + i] = tok;
        mask![row + i] = 0;
        weights![row + i] = 0;
        if (tok < 0) continue;
        real.push(i);
        if (uniform01(maskDraw(draws + i, key, step, rank, block)) < p) {
          noised![row + i] = maskId;
          mask![row + i] = 1;
          weights![row + i] = lossWeight![b]!;
          masked++;
        }
      }
      if (masked === 0 && real.length > 0) {
        const i = real[maskDraw(totalRows * seqLen + rowOffset + b, key, step, rank, block) % real.length]!;
        noised![row + i] = maskId;
        mask![row + i] = 1;
        weights![row + i] = lossWeight![b]!;
        masked = 1;
      }
      if (!empirical || masked === 0) continue;
      const w = empiricalWeight(lossWeight![b]!, real.length, masked);
      for (let i = 0; i < seqLen; i++) if (mask![row + i]) weights![row + i] = w;
    }
  },
  cases: (scale) =>
    scale === 'test'
      ? [
          { label: 'B3 T37', attrs: { batch: 3, seqLen: 37, rowOffset: 0, totalRows: 3, seed: 5, step: 11, rank: 0, maskId: 50, empirical: false } },
          { label: 'B5 T300 (chunks of 2)', attrs: { batch: 5, seqLen: 300, rowOffset: 0, totalRows: 5, seed: 2 ** 35 + 9, step: 1, rank: 2, maskId: 7, empirical: false } },
          { label: 'empirical B4 T300, rows 4..7 of 12', attrs: { batch: 4, seqLen: 300, rowOffset: 4, totalRows: 12, seed: 77, step: 3, rank: 1, maskId: 7, empirical: true } },
        ]
      : [{ label: 'B16 T1024', attrs: { batch: 16, seqLen: 1024, rowOffset: 0, totalRows: 16, seed: 1234, step: 1000, rank: 0, maskId: 50257, empirical: false } }],
  sample(rng, { batch, seqLen, maskId }) {
    const tokens = new Int32Array(batch * seqLen);
    // A quarter padding, scattered, so the fallback has to count non-padding positions.
    for (let i = 0; i < tokens.length; i++) tokens[i] = rng.uniform() < 0.25 ? -1 : rng.int(maskId);
    // Some rows get maskProb 0, so the at-least-one fallback runs.
    const maskProb = randu(rng, batch, 0, 1).map((p) => (rng.uniform() < 0.3 ? 0 : p));
    return { tokens, maskProb, lossWeight: randu(rng, batch, 0.5, 5) };
  },
  // Masks and ids are integers (exact match always); weights are copies, or with `empirical` one
  // f32 quotient and product, which WGSL allows to be 2.5 ULP off (≈ 3e-7).
  tolerance: { f32: 3e-7 },
});
