import type { GivenBatch } from '../../src/model/inputs.js';

/**
 * `n` tokens in rows of `seqLen`: fixed ids, and next-token-like targets of which every
 * `ignoreEvery`-th is ignored (-1; 0: none). From `secondDoc` on, each row's tokens are a second
 * document whose positions start again at 0.
 */
export function tokenBatch(n: number, seqLen: number, { secondDoc = seqLen, ignoreEvery = 0 } = {}): GivenBatch {
  const t = (i: number) => i % seqLen;
  return {
    inputs: Int32Array.from({ length: n }, (_, i) => (i * 29 + 5) % 256),
    targets: Int32Array.from({ length: n }, (_, i) => (ignoreEvery > 0 && i % ignoreEvery === 0 ? -1 : (i * 31 + 2) % 256)),
    segIds: Int32Array.from({ length: n }, (_, i) => (t(i) < secondDoc ? 0 : 1)),
    positions: Int32Array.from({ length: n }, (_, i) => (t(i) < secondDoc ? t(i) : t(i) - secondDoc)),
  };
}

/** Masked-diffusion-like loss weights: a third of the tokens weigh 0.5 to 4.5, the others `rest`. */
export function lossWeights(n: number, rest = 0): Float32Array {
  return Float32Array.from({ length: n }, (_, i) => (i % 3 === 1 ? 0.5 + (i % 5) : rest));
}
