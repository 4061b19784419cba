/**
 * philox: a table of Philox4x32-10 blocks, block i keyed by counter [i, step, rank, purpose] and
 * the 64-bit seed. The op pins the WGSL Philox to the TypeScript one bit for bit; kernels that
 * draw random numbers (diffusion_mask, dropout) import the same shaders/lib/philox.wgsl.
 */
import { philox4x32, seedKey } from '../rng/philox.js';
import { badAttr, defineOp, requireDims } from './op.js';

export interface PhiloxAttrs {
  /** Non-negative integer up to 2^53 (split into the two key words by seedKey). */
  readonly seed: number;
  readonly step: number;
  readonly rank: number;
  /** An RngPurpose value. */
  readonly purpose: number;
  readonly blocks: number;
}

/** Require attributes to be integers in [0, 2^32). */
export function requireU32<A>(op: string, attrs: A, keys: readonly (keyof A & string)[]): void {
  for (const k of keys) {
    const v = attrs[k];
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v > 0xffffffff) badAttr(op, k, v, 'expected an integer in [0, 2^32)');
  }
}

/** Require a seed that seedKey accepts. */
export function requireSeed(op: string, seed: unknown): void {
  if (typeof seed !== 'number' || !Number.isSafeInteger(seed) || seed < 0) badAttr(op, 'seed', seed, 'expected a non-negative integer up to 2^53');
}

export const philox = defineOp<PhiloxAttrs>({
  name: 'philox',
  summary: 'out[i] = philox4x32(counter = [i, step, rank, purpose], key = seed)',
  args: [{ name: 'out', role: 'out', dtype: 'u32' }],
  validate(attrs) {
    requireDims('philox', attrs, ['blocks']);
    requireSeed('philox', attrs.seed);
    requireU32('philox', attrs, ['step', 'rank', 'purpose', 'blocks']);
  },
  shapes: ({ blocks }) => ({ out: [blocks, 4] }),
  reference({ out }, { seed, step, rank, purpose, blocks }) {
    const key = seedKey(seed);
    const block = new Uint32Array(4);
    for (let i = 0; i < blocks; i++) {
      philox4x32([i, step, rank, purpose], key, block);
      out!.set(block, 4 * i);
    }
  },
  cases: (scale) =>
    scale === 'test'
      ? [
          { label: 'seed 0, 3 blocks', attrs: { seed: 0, step: 0, rank: 0, purpose: 0, blocks: 3 } },
          // A seed above 2^32 exercises the key's high word; 1000 blocks is not a multiple of 256.
          { label: 'seed > 2^32, 1000 blocks', attrs: { seed: 2 ** 40 + 12345, step: 77, rank: 3, purpose: 3, blocks: 1000 } },
        ]
      : [{ label: '1M blocks', attrs: { seed: 1234, step: 1000, rank: 0, purpose: 3, blocks: 1 << 20 } }],
  sample: () => ({}),
  tolerance: {},
});
