/**
 * compact_rows: the rows of the loss that count (a target ≥ 0 and a weight ≠ 0) moved to the
 * front, in order. The masked diffusion loss weights only masked tokens, about half of them, so the
 * LM head and the loss need run only over those (src/model/llama.ts, train.lossRows):
 *   order[k] = the k-th counted row (k < count), else −1;
 *   slot[r] = row r's place in that order, or −1 when it does not count;
 *   count[0] = how many count;
 *   packedTargets[k], packedWeights[k] = that row's target and weight (−1 and 0 past count).
 * `order` gathers rows into the packed layout and `slot` scatters them back, both with the
 * embedding op (an id of −1 gives a zero row).
 */
import { defineOp, randint, randn, requireDims } from './op.js';

export interface CompactRowsAttrs {
  readonly rows: number;
}

export const compactRows = defineOp<CompactRowsAttrs>({
  name: 'compact_rows',
  summary: 'order, slot, count and packed targets/weights of the rows with target >= 0 and weight != 0, in row order',
  args: [
    { name: 'targets', role: 'in', dtype: 'i32' },
    { name: 'weights', role: 'in', dtype: 'f32' },
    { name: 'order', role: 'out', dtype: 'i32' },
    { name: 'slot', role: 'out', dtype: 'i32' },
    { name: 'count', role: 'out', dtype: 'i32' },
    { name: 'packedTargets', role: 'out', dtype: 'i32' },
    { name: 'packedWeights', role: 'out', dtype: 'f32' },
  ],
  validate: (attrs) => requireDims('compact_rows', attrs, ['rows']),
  shapes: ({ rows }) => ({
    targets: [rows], weights: [rows], order: [rows], slot: [rows], count: [1], packedTargets: [rows], packedWeights: [rows],
  }),
  reference({ targets, weights, order, slot, count, packedTargets, packedWeights }, { rows }) {
    let k = 0;
    for (let r = 0; r < rows; r++) {
      slot![r] = -1;
      if (targets![r]! < 0 || weights![r] === 0) continue;
      order![k] = r;
      slot![r] = k;
      packedTargets![k] = targets![r]!;
      packedWeights![k] = weights![r]!;
      k++;
    }
    count![0] = k;
    for (; k < rows; k++) {
      order![k] = -1;
      packedTargets![k] = -1;
      packedWeights![k] = 0;
    }
  },
  cases: (scale) =>
    scale === 'test'
      ? [
          // Fewer rows than the kernels' threads; a row count no chunk size divides; many chunks a thread.
          { label: 'rows 37', attrs: { rows: 37 } },
          { label: 'rows 1001', attrs: { rows: 1001 } },
          { label: 'rows 20000', attrs: { rows: 20000 } },
        ]
      : [{ label: 'rows 16384', attrs: { rows: 16384 } }],
  sample(rng, { rows }) {
    // About half the rows count, as under masked diffusion; some ignored targets carry a weight
    // and some zero weights a target, so both conditions are exercised.
    const targets = randint(rng, rows, 0, 50000);
    const weights = randn(rng, rows).map((x) => (x < 0 ? 0 : 1 + x));
    for (let r = 0; r < rows; r++) if (rng.uniform() < 0.1) targets[r] = -1;
    return { targets, weights };
  },
  // Integers and copies: exact.
  tolerance: { f32: 0 },
});
