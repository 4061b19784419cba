import { fail } from '../../../errors.js';
import { type EmbeddingAttrs, embedding, embeddingBackward } from '../../../ops/embedding.js';
import { Tensor } from '../../../tensor.js';
import { type KernelContext, ceilDiv, defineKernel, grid1d } from '../kernel.js';

/** Workgroup size in shaders/embedding.wgsl: also the sort's tile length and radix (8 bits). */
const WG = 256;
const RADIX_BITS = 8;
/** Sorted positions a chunk_sum workgroup sums (CHUNK in the shader). */
const CHUNK = 64;
/** Vocab rows per row_sum workgroup (ROWS in the shader). */
const ROWS_PER_GROUP = 16;

export interface RowChunk {
  readonly rowBase: number;
  readonly rows: number;
}

function params({ tokens, vocab, dim }: EmbeddingAttrs, chunk: RowChunk = { rowBase: 0, rows: vocab }, shift = 0) {
  return { tokens, vocab, dim, shift, tiles: ceilDiv(tokens, WG), ...chunk };
}

function gcd(a: number, b: number): number {
  return b === 0 ? a : gcd(b, a % b);
}

/**
 * Row ranges of the [vocab, dim] tensor that each fit one storage binding (lavapipe allows 128 MiB,
 * a GPT-2 table is 154 MB) and start at an aligned byte offset.
 */
export function rowChunks(k: KernelContext, { vocab, dim }: EmbeddingAttrs): RowChunk[] {
  const rowBytes = dim * 4;
  const align = k.limits.minStorageBufferOffsetAlignment;
  const step = align / gcd(rowBytes, align);
  const perChunk = Math.floor(Math.floor(k.limits.maxStorageBufferBindingSize / rowBytes) / step) * step;
  if (perChunk === 0) fail('OUT_OF_MEMORY', `embedding: a row of ${dim} floats exceeds this adapter's maxStorageBufferBindingSize`);
  const chunks: RowChunk[] = [];
  for (let rowBase = 0; rowBase < vocab; rowBase += perChunk) chunks.push({ rowBase, rows: Math.min(perChunk, vocab - rowBase) });
  return chunks;
}

/** Rows [rowBase, rowBase + rows) of a [vocab, dim] tensor, as a view on the same buffer. */
function rowsOf(t: Tensor, { rowBase, rows }: RowChunk, dim: number): Tensor {
  return new Tensor(t.backend, [rows, dim], t.dtype, t.handle, t.offset + rowBase * dim);
}

export const embeddingKernel = defineKernel({
  op: embedding,
  shaders: ['embedding'],
  run(k, { ids, table, out }, attrs) {
    for (const chunk of rowChunks(k, attrs)) {
      k.dispatch({
        shader: 'embedding',
        entry: 'gather',
        bindings: { params: params(attrs, chunk), ids: ids!, table: rowsOf(table!, chunk, attrs.dim), out: out! },
        workgroups: grid1d(attrs.tokens * attrs.dim, WG, k.limits.maxComputeWorkgroupsPerDimension),
      });
    }
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
    const p = params(attrs, undefined, pass * RADIX_BITS);
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
    // Full chunks of CHUNK sorted positions (the shader's): a long row sums them first.
    const chunks = Math.floor(attrs.tokens / CHUNK);
    const chunkSums = k.scratch([Math.max(1, chunks * attrs.dim)], 'f32');
    if (chunks > 0) {
      k.dispatch({
        shader: 'embedding', entry: 'chunk_sum',
        bindings: { params: params(attrs), keysIn: keys, valsIn: positions, dout: dout!, chunkSums },
        workgroups: grid1d(chunks, 1, k.limits.maxComputeWorkgroupsPerDimension),
      });
    }
    for (const chunk of rowChunks(k, attrs)) {
      k.dispatch({
        shader: 'embedding', entry: 'row_sum',
        bindings: { params: params(attrs, chunk), keysIn: keys, valsIn: positions, dout: dout!, chunkSums, dtable: rowsOf(dtable!, chunk, attrs.dim) },
        workgroups: grid1d(chunk.rows, ROWS_PER_GROUP, k.limits.maxComputeWorkgroupsPerDimension),
        constants: { ACCUMULATE: attrs.accumulate ? 1 : 0 },
      });
    }
  },
});
