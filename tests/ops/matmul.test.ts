import { afterAll, describe, expect, it } from 'vitest';
import { CpuBackend } from '../../src/backend/cpu/cpu.js';
import { MdlmError } from '../../src/errors.js';
import { checkParity, freshSeed, runReference } from '../../src/harness/parity.js';
import { type MatmulAttrs, matmul, matmulAttrs } from '../../src/ops/matmul.js';
import { randn } from '../../src/ops/op.js';
import { PhiloxStream, RngPurpose } from '../../src/rng/philox.js';
import { hasWebGpu, webgpuBackend } from '../support/webgpu.js';

function ref(attrs: MatmulAttrs, a: number[], b: number[], out: number[] = []): number[] {
  const old = Float64Array.from({ length: attrs.batch * attrs.m * attrs.n }, (_, i) => out[i] ?? Number.NaN);
  return [...(runReference(matmul, { a: Float64Array.from(a), b: Float64Array.from(b), out: old }, attrs, 'f32').out as Float64Array)];
}

/** x stored [batch, r, c] -> [batch, c, r] */
function transpose(x: Float64Array, batch: number, r: number, c: number): Float64Array {
  const t = new Float64Array(x.length);
  for (let p = 0; p < batch; p++) for (let i = 0; i < r; i++) for (let j = 0; j < c; j++) t[p * r * c + j * r + i] = x[p * r * c + i * c + j]!;
  return t;
}

const attrs = matmulAttrs;

describe('matmul reference', () => {
  it('multiplies a 2x3 by a 3x2 by hand', () => {
    // [[1,2,3],[4,5,6]] · [[7,8],[9,10],[11,12]] = [[58,64],[139,154]]
    expect(ref(attrs(1, 2, 2, 3), [1, 2, 3, 4, 5, 6], [7, 8, 9, 10, 11, 12])).toEqual([58, 64, 139, 154]);
  });

  it('reads transposed storage: aᵀ with a stored [k, m], bᵀ with b stored [n, k]', () => {
    // same product as above with a given as its transpose [[1,4],[2,5],[3,6]] and b as [[7,9,11],[8,10,12]]
    expect(ref(attrs(1, 2, 2, 3, true, true), [1, 4, 2, 5, 3, 6], [7, 9, 11, 8, 10, 12])).toEqual([58, 64, 139, 154]);
  });

  it('overwrites out (NaN before) unless accumulating, then adds to it', () => {
    expect(ref(attrs(1, 2, 2, 3), [1, 2, 3, 4, 5, 6], [7, 8, 9, 10, 11, 12])).toEqual([58, 64, 139, 154]);
    expect(ref(attrs(1, 2, 2, 3, false, false, { accumulate: true }), [1, 2, 3, 4, 5, 6], [7, 8, 9, 10, 11, 12], [1, -1, 0.5, 100])).toEqual([59, 63, 139.5, 254]);
  });

  it('keeps batch items apart', () => {
    // batch 2 of 1x1x2: [1,2]·[3,4]ᵀ = 11 and [5,6]·[7,8]ᵀ = 83
    expect(ref(attrs(2, 1, 1, 2), [1, 2, 5, 6], [3, 4, 7, 8])).toEqual([11, 83]);
  });

  it('gives the same product for every transpose flag when inputs are stored to match', () => {
    const [batch, m, n, k] = [2, 5, 4, 3];
    const rng = new PhiloxStream(7, RngPurpose.harness);
    const a = randn(rng, batch * m * k);
    const b = randn(rng, batch * k * n);
    const out = new Float64Array(batch * m * n);
    const plain = runReference(matmul, { a, b, out }, attrs(batch, m, n, k), 'f32').out!;
    for (const [transA, transB] of [[true, false], [false, true], [true, true]] as const) {
      const inputs = { a: transA ? transpose(a, batch, m, k) : a, b: transB ? transpose(b, batch, k, n) : b, out };
      const got = runReference(matmul, inputs, attrs(batch, m, n, k, transA, transB), 'f32').out!;
      for (let i = 0; i < got.length; i++) expect(got[i]).toBeCloseTo(plain[i]!, 12);
    }
  });

  it('(A·B)ᵀ = Bᵀ·Aᵀ', () => {
    const [m, n, k] = [4, 6, 5];
    const rng = new PhiloxStream(11, RngPurpose.harness);
    const a = randn(rng, m * k);
    const b = randn(rng, k * n);
    const out = new Float64Array(m * n);
    const ab = runReference(matmul, { a, b, out }, attrs(1, m, n, k), 'f32').out as Float64Array;
    const btat = runReference(matmul, { a: b, b: a, out }, attrs(1, n, m, k, true, true), 'f32').out as Float64Array;
    const abT = transpose(ab, 1, m, n);
    for (let i = 0; i < abT.length; i++) expect(btat[i]).toBeCloseTo(abT[i]!, 12);
  });

  it('counts 2·batch·m·n·k flops', () => {
    expect(matmul.flops!(attrs(3, 4, 5, 6))).toBe(720);
  });
});

describe('matmul validation', () => {
  const cpu = new CpuBackend();

  function call(a: readonly number[], b: readonly number[], out: readonly number[], at: MatmulAttrs): () => void {
    return () => cpu.run(matmul, { a: cpu.alloc(a, 'f32'), b: cpu.alloc(b, 'f32'), out: cpu.alloc(out, 'f32') }, at);
  }

  it('names the op, argument and shapes when a has the wrong shape', () => {
    const f = call([1, 3, 4], [1, 4, 5], [1, 3, 5], attrs(1, 3, 5, 4, true, false));
    expect(f).toThrow(MdlmError);
    expect(f).toThrow(/matmul: argument 'a' expected shape \[1, ?4, ?3\], got \[1, ?3, ?4\]/);
  });

  it('names b when transB does not match its storage', () => {
    expect(call([1, 3, 4], [1, 4, 5], [1, 3, 5], attrs(1, 3, 5, 4, false, true))).toThrow(/matmul: argument 'b' expected shape/);
  });

  it('names out when its shape is wrong', () => {
    expect(call([2, 3, 4], [2, 4, 5], [1, 3, 5], attrs(2, 3, 5, 4))).toThrow(/matmul: argument 'out' expected shape/);
  });

  it('takes an f32 out under bf16 inputs only with outF32, and accumulates into it', async () => {
    const a = cpu.alloc([1, 1, 2], 'bf16');
    const b = cpu.alloc([1, 2, 1], 'bf16');
    cpu.upload(a, Float32Array.from([1, 2]));
    cpu.upload(b, Float32Array.from([3, 4]));
    const wide = cpu.alloc([1, 1, 1], 'f32');
    cpu.upload(wide, Float32Array.from([0.25]));
    expect(() => cpu.run(matmul, { a, b, out: wide }, attrs(1, 1, 1, 2, false, false, { accumulate: true }))).toThrow(/matmul: argument 'out' is f32 but other float arguments are bf16/);
    cpu.run(matmul, { a, b, out: wide }, attrs(1, 1, 1, 2, false, false, { accumulate: true, outF32: true }));
    expect(Array.from((await cpu.download(wide)) as Float32Array)).toEqual([11.25]);
    const narrow = cpu.alloc([1, 1, 1], 'bf16');
    expect(() => cpu.run(matmul, { a, b, out: narrow }, attrs(1, 1, 1, 2, false, false, { outF32: true }))).toThrow(/matmul: argument 'out' must be f32, got bf16/);
    expect(() => cpu.run(matmul, { a: wide, b, out: wide }, attrs(1, 1, 1, 1))).toThrow(/matmul: argument 'b' is bf16 but other float arguments are f32/);
  });

  it('rejects non-positive dimensions and non-boolean transposes', () => {
    expect(call([1, 3, 4], [1, 4, 5], [1, 3, 5], attrs(1, 0, 5, 4))).toThrow(/matmul: attribute 'm' is 0/);
    const bad = { ...attrs(1, 3, 5, 4), transB: 1 } as unknown as MatmulAttrs;
    expect(call([1, 3, 4], [1, 4, 5], [1, 3, 5], bad)).toThrow(/matmul: attribute 'transB' is 1/);
  });
});

describe('matmul on webgpu', () => {
  afterAll(async () => {
    (await webgpuBackend())?.destroy();
  });

  // Odd extents (scalar loads everywhere) and extents that are multiples of 4 with ragged edges
  // (vec4 interior tiles, scalar edge tiles, a partial last k-step), accumulating; 18 64-row blocks
  // (the second group of 16 row blocks is partial); then a large batch, overwriting. Few distinct
  // pipelines: lavapipe takes seconds to compile each.
  const transposes = [[false, false], [false, true], [true, false], [true, true]] as const;
  const cases = [
    ...[[37, 70, 45], [132, 260, 40]].flatMap(([m, n, k]) => transposes.map(([tA, tB]) => attrs(2, m!, n!, k!, tA, tB, { accumulate: true }))),
    attrs(1, 1100, 130, 12),
    attrs(300, 128, 256, 20),
    attrs(300, 128, 256, 20, true, true),
  ].map((at) => ({ label: `${at.accumulate ? 'out += ' : ''}${at.transA ? 'aᵀ' : 'a'}·${at.transB ? 'bᵀ' : 'b'} batch ${at.batch} ${at.m}x${at.n}x${at.k}`, attrs: at }));

  it.skipIf(!hasWebGpu)('matches the reference for every transpose, odd and vec4-aligned shapes', async () => {
    const gpu = (await webgpuBackend())!;
    for (const c of cases) {
      const r = await checkParity(gpu, matmul, c, { seed: freshSeed() });
      expect(r.error, c.label).toBeUndefined();
      expect(r.relErr, JSON.stringify(r)).toBeLessThanOrEqual(r.tol);
    }
  });
});
