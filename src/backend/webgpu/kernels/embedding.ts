import { type EmbeddingAttrs, embedding, embeddingBackward } from '../../../ops/embedding.js';
import type { Tensor } from '../../../tensor.js';
import { type KernelContext, ceilDiv, defineKernel, grid1d } from '../kernel.js';

/** Workgroup size in shaders/embedding.wgsl: also the sort's tile length and radix (8 bits). */
const WG = 256;
const RADIX_BITS = 8;

function params({ tokens, vocab, dim }: EmbeddingAttrs, shift = 0) {
  return { tokens, vocab, dim, shift, tiles: ceilDiv(tokens, WG) };
}

export const embeddingKernel = defineKernel({
  op: embedding,
  shaders: ['embedding'],
  run(k, { ids, table, out }, attrs) {
    k.dispatch({
      shader: 'embedding',
      entry: 'gather',
      bindings: { params: params(attrs), ids: ids!, table: table!, out: out! },
      workgroups: grid1d(attrs.tokens * attrs.dim, WG, k.limits.maxComputeWorkgroupsPerDimension),
    });
  },
});

/** Positions sorted stably by id (out-of-range ids keyed `vocab`, last): [keys, positions]. */
function sortPositionsById(k: KernelContext, ids: Tensor, attrs: EmbeddingAttrs): [Tensor, Tensor] {
  const { tokens, vocab } = attrs;
  const maxDim = k.limits.maxComputeWorkgroupsPerDimension;
  const tiles = ceilDiv(tokens, WG);
  let keys = k.scratch([tokens], 'u32');
  let vals = k.scratch([tokens], 'u32');
  let keysNext = k.scratch([tokens], 'u32');
  let valsNext = k.scratch([tokens], 'u32');
  const tileCounts = k.scratch([WG * tiles], 'u32');
  k.dispatch({
    shader: 'embedding', entry: 'sort_keys',
    bindings: { params: params(attrs), ids, keysOut: keys, valsOut: vals },
    workgroups: grid1d(tokens, WG, maxDim),
  });
  // Keys run up to vocab itself (the out-of-range key).
  const passes = Math.ceil((32 - Math.clz32(vocab)) / RADIX_BITS);
  for (let pass = 0; pass < passes; pass++) {
    const p = params(attrs, pass * RADIX_BITS);
    k.dispatch({ shader: 'embedding', entry: 'radix_histogram', bindings: { params: p, keysIn: keys, tileCounts }, workgroups: grid1d(tiles, 1, maxDim) });
    k.dispatch({ shader: 'embedding', entry: 'radix_scan', bindings: { params: p, tileCounts }, workgroups: [1] });
    k.dispatch({
      shader: 'embedding', entry: 'radix_scatter',
      bindings: { params: p, keysIn: keys, valsIn: vals, tileCounts, keysOut: keysNext, valsOut: valsNext },
      workgroups: grid1d(tiles, 1, maxDim),
    });
    [keys, keysNext] = [keysNext, keys];
    [vals, valsNext] = [valsNext, vals];
  }
  return [keys, vals];
}

export const embeddingBackwardKernel = defineKernel({
  op: embeddingBackward,
  shaders: ['embedding'],
  run(k, { ids, dout, dtable }, attrs) {
    const [keys, positions] = sortPositionsById(k, ids!, attrs);
    k.dispatch({
      shader: 'embedding', entry: 'row_sum',
      bindings: { params: params(attrs), keysIn: keys, valsIn: positions, dout: dout!, dtable: dtable! },
      workgroups: grid1d(attrs.vocab, 1, k.limits.maxComputeWorkgroupsPerDimension),
    });
  },
});
