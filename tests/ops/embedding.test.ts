import { afterAll, describe, expect, it } from 'vitest';
import { CpuBackend } from '../../src/backend/cpu/cpu.js';
import type { KernelContext } from '../../src/backend/webgpu/kernel.js';
import { rowChunks } from '../../src/backend/webgpu/kernels/embedding.js';
import { MdlmError } from '../../src/errors.js';
import { type EmbeddingAttrs, type EmbeddingBackwardAttrs, embedding, embeddingBackward } from '../../src/ops/embedding.js';
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
const smallBackward: EmbeddingBackwardAttrs = { ...small, accumulate: false, outF32: false };

function randomCase(tokens: number, vocab: number, dim: number, seed: number) {
  const rng = new PhiloxStream(seed, RngPurpose.harness);
  const ids = Int32Array.from({ length: tokens }, () => rng.int(vocab));
  const dout = Float32Array.from({ length: tokens * dim }, () => rng.normal());
  return { attrs: { tokens, vocab, dim, accumulate: false, outF32: false }, ids, dout };
}

/** Positions sorted stably by id, out-of-range ids (keyed vocab) last: the kernels' sort. */
function sortedPositions(attrs: EmbeddingAttrs, ids: Int32Array): { keys: number[]; positions: number[] } {
  const key = (i: number): number => (ids[i]! >= 0 && ids[i]! < attrs.vocab ? ids[i]! : attrs.vocab);
  const positions = Array.from({ length: attrs.tokens }, (_, i) => i).sort((a, b) => key(a) - key(b) || a - b);
  return { keys: positions.map(key), positions };
}

/**
 * The scatter-add in the kernels' order, in f32: each row's positions in increasing order, except
 * that the full chunks of 64 sorted positions inside a row are summed on their own first and their
 * sums added in turn.
 */
function kernelOrderF32(attrs: EmbeddingAttrs, ids: Int32Array, dout: Float32Array): Float32Array {
  const CHUNK = 64;
  const { keys, positions } = sortedPositions(attrs, ids);
  const sum = (lo: number, hi: number, c: number): number => {
    let acc = 0;
    for (let q = lo; q < hi; q++) acc = Math.fround(acc + dout[positions[q]! * attrs.dim + c]!);
    return acc;
  };
  const out = new Float32Array(attrs.vocab * attrs.dim);
  for (let lo = 0; lo < attrs.tokens && keys[lo]! < attrs.vocab; ) {
    let hi = lo;
    while (hi < attrs.tokens && keys[hi] === keys[lo]) hi++;
    const chunkLo = Math.ceil(lo / CHUNK), chunkHi = Math.floor(hi / CHUNK);
    for (let c = 0; c < attrs.dim; c++) {
      let acc: number;
      if (chunkHi > chunkLo) {
        acc = sum(lo, chunkLo * CHUNK, c);
        for (let k = chunkLo; k < chunkHi; k++) acc = Math.fround(acc + sum(k * CHUNK, (k + 1) * CHUNK, c));
        acc = Math.fround(acc + sum(chunkHi * CHUNK, hi, c));
      } else {
        acc = sum(lo, hi, c);
      }
      out[keys[lo]! * attrs.dim + c] = acc;
    }
    lo = hi;
  }
  return out;
}

describe('embedding reference', () => {
  it('gathers rows by id', async () => {
    const { out } = await runOp(cpu, embedding, small, { ids: Int32Array.from([2, 0, 2, 1]), table });
    expect(Array.from(out!)).toEqual([20, 21, 0, 1, 20, 21, 10, 11]);
  });

  it('gives a zero row for id −1, and its backward leaves no trace of that position', async () => {
    const { out } = await runOp(cpu, embedding, small, { ids: Int32Array.from([2, -1, 0, -1]), table });
    expect(Array.from(out!)).toEqual([20, 21, 0, 0, 0, 1, 0, 0]);
    const dout = Float32Array.from([1, 2, 3, 4, 5, 6, 7, 8]);
    const { dtable } = await runOp(cpu, embeddingBackward, smallBackward, { ids: Int32Array.from([1, -1, 1, -1]), dout, dtable: [9, 9, 9, 9, 9, 9] });
    expect(Array.from(dtable!)).toEqual([0, 0, 6, 8, 0, 0]);
  });

  it('backward sums the rows of repeated ids and leaves unused rows zero', async () => {
    const dout = Float32Array.from([1, 2, 3, 4, 5, 6, 7, 8]);
    const { dtable } = await runOp(cpu, embeddingBackward, smallBackward, { ids: Int32Array.from([1, 1, 0, 1]), dout, dtable: [9, 9, 9, 9, 9, 9] });
    // Row 1 = positions 0, 1, 3: [1+3+7, 2+4+8]; row 0 = position 2; row 2 unused (the old 9s overwritten).
    expect(Array.from(dtable!)).toEqual([5, 6, 11, 14, 0, 0]);
  });

  it('backward with accumulate adds the sums to the f32 gradient a bf16 dout feeds', async () => {
    const dout = Float32Array.from([1, 2, 3, 4, 5, 6, 7, 8]);
    const attrs = { ...small, accumulate: true, outF32: true };
    const b = cpu;
    const t = { ids: b.alloc([4], 'i32'), dout: b.alloc([4, 2], 'bf16'), dtable: b.alloc([3, 2], 'f32') };
    b.upload(t.ids, Int32Array.from([1, 1, 0, 1]));
    b.upload(t.dout, dout);
    b.upload(t.dtable, Float32Array.from([0.5, 0.5, 0.25, 0.25, -1, 2]));
    b.run(embeddingBackward, t, attrs);
    expect(Array.from((await b.download(t.dtable)) as Float32Array)).toEqual([5.5, 6.5, 11.25, 14.25, -1, 2]);
    expect(() => b.run(embeddingBackward, t, { ...attrs, outF32: false })).toThrow(/embedding_backward: argument 'dtable' is f32 but other float arguments are bf16/);
    Object.values(t).forEach((x) => b.free(x));
  });

  it.each([
    [embedding, -2, 'table'],
    [embedding, 3, 'table'],
    [embeddingBackward, 7, 'dout'],
  ] as const)('%s rejects an id outside the vocabulary, naming the position and value', async (op, bad, floatArg) => {
    const ids = Int32Array.from([0, 1, bad, 2]);
    const call = runOp(cpu, op as typeof embeddingBackward, smallBackward, { ids, [floatArg]: new Float32Array(floatArg === 'table' ? 6 : 8) });
    await expect(call).rejects.toBeInstanceOf(MdlmError);
    await expect(call).rejects.toThrow(new RegExp(`${op.name}: ids\\[2\\] = ${bad} is outside the vocabulary \\[0, 3\\) and not −1`));
  });

  it('rejects a table of the wrong shape and non-positive sizes', () => {
    const args = { ids: cpu.alloc([4], 'i32'), table: cpu.alloc([3, 3], 'f32'), out: cpu.alloc([4, 2], 'f32') };
    expect(() => cpu.run(embedding, args, small)).toThrow(/embedding: argument 'table' expected shape \[3, 2\], got \[3, 3\]/);
    expect(() => embeddingBackward.validate!({ ...smallBackward, vocab: 0 })).toThrow(/embedding_backward: attribute 'vocab'/);
    expect(() => embeddingBackward.validate!({ ...small } as EmbeddingBackwardAttrs)).toThrow(/embedding_backward: attribute 'accumulate' is undefined/);
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
    // Rows of ~1000 positions: full chunks of 64 summed first.
    ['3000 tokens, vocab 3', 3000, 3, 7],
    // Two radix passes.
    ['2000 tokens, vocab 1000', 2000, 1000, 3],
    // Three radix passes (ids above 2^16).
    ['600 tokens, vocab 70000', 600, 70000, 1],
  ])('backward (%s) is the f32 sum in the kernels\' fixed order, bitwise the same every run', async (_, tokens, vocab, dim) => {
    const gpu = (await webgpuBackend())!;
    const { attrs, ids, dout } = randomCase(tokens, vocab, dim, 7);
    const first = (await runOp(gpu, embeddingBackward, attrs, { ids, dout })).dtable!;
    const second = (await runOp(gpu, embeddingBackward, attrs, { ids, dout })).dtable!;
    expect(new Uint32Array(second.buffer)).toEqual(new Uint32Array(first.buffer));
    expect(first).toEqual(kernelOrderF32(attrs, ids, dout));
    // Accumulating onto the sums themselves doubles them exactly.
    const doubled = (await runOp(gpu, embeddingBackward, { ...attrs, accumulate: true, outF32: true }, { ids, dout, dtable: first })).dtable!;
    expect(doubled).toEqual(first.map((v) => 2 * v));
  });

  it('skips out-of-range ids: zero rows forward, ignored backward', async () => {
    const gpu = (await webgpuBackend())!;
    const ids = Int32Array.from([2, -5, 3, 1]);
    const { out } = await runOp(gpu, embedding, small, { ids, table });
    expect(Array.from(out!)).toEqual([20, 21, 0, 0, 0, 0, 10, 11]);
    const dout = Float32Array.from([1, 2, 3, 4, 5, 6, 7, 8]);
    const { dtable } = await runOp(gpu, embeddingBackward, smallBackward, { ids, dout });
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
