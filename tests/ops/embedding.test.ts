import { afterAll, describe, expect, it } from 'vitest';
import { CpuBackend } from '../../src/backend/cpu/cpu.js';
import type { KernelContext } from '../../src/backend/webgpu/kernel.js';
import { rowChunks } from '../../src/backend/webgpu/kernels/embedding.js';
import { MdlmError } from '../../src/errors.js';
import { type EmbeddingAttrs, embedding, embeddingBackward } from '../../src/ops/embedding.js';
import { PhiloxStream, RngPurpose } from '../../src/rng/philox.js';
import { runOp } from '../support/run_op.js';
import { hasWebGpu, webgpuBackend } from '../support/webgpu.js';

const cpu = new CpuBackend();

afterAll(async () => {
  (await webgpuBackend())?.destroy();
});

// table rows: row v = [10v, 10v + 1]
const table = Float32Array.from([0, 1, 10, 11, 20, 21]);
const small: EmbeddingAttrs = { tokens: 4, vocab: 3, dim: 2 };

function randomCase(tokens: number, vocab: number, dim: number, seed: number) {
  const rng = new PhiloxStream(seed, RngPurpose.harness);
  const ids = Int32Array.from({ length: tokens }, () => rng.int(vocab));
  const dout = Float32Array.from({ length: tokens * dim }, () => rng.normal());
  return { attrs: { tokens, vocab, dim }, ids, dout };
}

/** dtable summed in f32, position by position in increasing order: what the kernel promises. */
function sequentialF32(attrs: EmbeddingAttrs, ids: Int32Array, dout: Float32Array): Float32Array {
  const acc = new Float32Array(attrs.vocab * attrs.dim);
  for (let i = 0; i < attrs.tokens; i++) {
    const v = ids[i]!;
    if (v < 0 || v >= attrs.vocab) continue;
    for (let c = 0; c < attrs.dim; c++) acc[v * attrs.dim + c] = Math.fround(acc[v * attrs.dim + c]! + dout[i * attrs.dim + c]!);
  }
  return acc;
}

describe('embedding reference', () => {
  it('gathers rows by id', async () => {
    const { out } = await runOp(cpu, embedding, small, { ids: Int32Array.from([2, 0, 2, 1]), table });
    expect(Array.from(out!)).toEqual([20, 21, 0, 1, 20, 21, 10, 11]);
  });

  it('backward sums the rows of repeated ids and leaves unused rows zero', async () => {
    const dout = Float32Array.from([1, 2, 3, 4, 5, 6, 7, 8]);
    const { dtable } = await runOp(cpu, embeddingBackward, small, { ids: Int32Array.from([1, 1, 0, 1]), dout });
    // Row 1 = positions 0, 1, 3: [1+3+7, 2+4+8]; row 0 = position 2; row 2 unused.
    expect(Array.from(dtable!)).toEqual([5, 6, 11, 14, 0, 0]);
  });

  it.each([
    [embedding, -1, 'table'],
    [embedding, 3, 'table'],
    [embeddingBackward, 7, 'dout'],
  ] as const)('%s rejects an id outside the vocabulary, naming the position and value', async (op, bad, floatArg) => {
    const ids = Int32Array.from([0, 1, bad, 2]);
    const call = runOp(cpu, op, small, { ids, [floatArg]: new Float32Array(floatArg === 'table' ? 6 : 8) });
    await expect(call).rejects.toBeInstanceOf(MdlmError);
    await expect(call).rejects.toThrow(new RegExp(`${op.name}: ids\\[2\\] = ${bad} is outside the vocabulary \\[0, 3\\)`));
  });

  it('rejects a table of the wrong shape and non-positive sizes', () => {
    const args = { ids: cpu.alloc([4], 'i32'), table: cpu.alloc([3, 3], 'f32'), out: cpu.alloc([4, 2], 'f32') };
    expect(() => cpu.run(embedding, args, small)).toThrow(/embedding: argument 'table' expected shape \[3, 2\], got \[3, 3\]/);
    expect(() => embeddingBackward.validate!({ ...small, vocab: 0 })).toThrow(/embedding_backward: attribute 'vocab'/);
  });
});

describe.skipIf(!hasWebGpu)('embedding on webgpu', () => {
  it('gathers by hand-checked values', async () => {
    const gpu = (await webgpuBackend())!;
    const { out } = await runOp(gpu, embedding, small, { ids: Int32Array.from([2, 0, 2, 1]), table });
    expect(Array.from(out!)).toEqual([20, 21, 0, 1, 20, 21, 10, 11]);
  });

  it.each([
    // Many repeats over several sort tiles; one radix pass.
    ['3000 tokens, vocab 40', 3000, 40, 33],
    // Two radix passes.
    ['2000 tokens, vocab 1000', 2000, 1000, 3],
    // Three radix passes (ids above 2^16).
    ['600 tokens, vocab 70000', 600, 70000, 1],
  ])('backward (%s) is the f32 sum in increasing position order, bitwise the same every run', async (_, tokens, vocab, dim) => {
    const gpu = (await webgpuBackend())!;
    const { attrs, ids, dout } = randomCase(tokens, vocab, dim, 7);
    const first = (await runOp(gpu, embeddingBackward, attrs, { ids, dout })).dtable!;
    const second = (await runOp(gpu, embeddingBackward, attrs, { ids, dout })).dtable!;
    expect(new Uint32Array(second.buffer)).toEqual(new Uint32Array(first.buffer));
    expect(first).toEqual(sequentialF32(attrs, ids, dout));
  });

  it('skips out-of-range ids: zero rows forward, ignored backward', async () => {
    const gpu = (await webgpuBackend())!;
    const ids = Int32Array.from([2, -5, 3, 1]);
    const { out } = await runOp(gpu, embedding, small, { ids, table });
    expect(Array.from(out!)).toEqual([20, 21, 0, 0, 0, 0, 10, 11]);
    const dout = Float32Array.from([1, 2, 3, 4, 5, 6, 7, 8]);
    const { dtable } = await runOp(gpu, embeddingBackward, small, { ids, dout });
    expect(Array.from(dtable!)).toEqual([0, 0, 7, 8, 1, 2]);
  });
});

describe('embedding kernel row chunks', () => {
  it('cover the vocabulary in aligned ranges that each fit one binding', () => {
    const limits = { maxStorageBufferBindingSize: 10_000, minStorageBufferOffsetAlignment: 256 } as GPUSupportedLimits;
    const k = { limits } as KernelContext;
    // dim 12: 48-byte rows, so aligned starts are multiples of 16 rows; 208 rows (9984 bytes) fit.
    const chunks = rowChunks(k, { tokens: 1, vocab: 500, dim: 12 });
    expect(chunks).toEqual([
      { rowBase: 0, rows: 208 },
      { rowBase: 208, rows: 208 },
      { rowBase: 416, rows: 84 },
    ]);
    expect(rowChunks(k, { tokens: 1, vocab: 50, dim: 12 })).toEqual([{ rowBase: 0, rows: 50 }]);
  });
});
