/** The attention references against hand values and identities, and their argument checks. */
import { describe, expect, it } from 'vitest';
import { CpuBackend } from '../../src/backend/cpu/cpu.js';
import { MdlmError } from '../../src/errors.js';
import { runReference } from '../../src/harness/parity.js';
import { type AttentionAttrs, attention, attentionBackward } from '../../src/ops/attention.js';
import { type RefArgs, randn, validateCall } from '../../src/ops/op.js';
import { PhiloxStream, RngPurpose } from '../../src/rng/philox.js';

function attrs(over: Partial<AttentionAttrs>): AttentionAttrs {
  const a = { batch: 1, seqLen: 6, heads: 2, kvHeads: 2, headDim: 4, causal: false, scale: 0.5, ...over };
  return a;
}

function randomInputs(a: AttentionAttrs, seed: number, segIds?: Int32Array): RefArgs {
  const rng = new PhiloxStream(seed, RngPurpose.harness);
  const { batch: B, seqLen: T, heads: H, kvHeads: G, headDim: D } = a;
  return {
    q: randn(rng, B * T * H * D),
    k: randn(rng, B * T * G * D),
    v: randn(rng, B * T * G * D),
    segIds: segIds ?? new Int32Array(B * T),
    dout: randn(rng, B * T * H * D),
    positions: new Int32Array(B * T),
  };
}

function forward(a: AttentionAttrs, inputs: RefArgs): RefArgs {
  return runReference(attention, inputs, a, 'f32');
}

function backward(a: AttentionAttrs, inputs: RefArgs): RefArgs {
  const f = forward(a, inputs);
  return runReference(attentionBackward, { ...inputs, out: f.out!, lse: f.lse! }, a, 'f32');
}

function expectClose(got: ArrayLike<number>, want: ArrayLike<number>, tol = 1e-12): void {
  expect(got.length).toBe(want.length);
  for (let i = 0; i < want.length; i++) expect(Math.abs(got[i]! - want[i]!), `index ${i}`).toBeLessThanOrEqual(tol * Math.max(1, Math.abs(want[i]!)));
}

/** Rows [t0, t0 + len) of a [1, T, H, D] tensor. */
function sliceRows(x: ArrayLike<number>, t0: number, len: number, width: number): Float64Array {
  return Float64Array.from(Array.prototype.slice.call(x, t0 * width, (t0 + len) * width) as number[]);
}

describe('attention reference', () => {
  it('matches a hand-computed case', () => {
    // One head, T=2, bidirectional: scores of both queries are [1, 0], so p = [e, 1] / (e + 1).
    const a = attrs({ seqLen: 2, heads: 1, kvHeads: 1, scale: 1 });
    const r = forward(a, {
      q: Float64Array.from([1, 0, 0, 0, 1, 0, 0, 0]),
      k: Float64Array.from([1, 0, 0, 0, 0, 0, 0, 0]),
      v: Float64Array.from([1, 2, 3, 4, 5, 6, 7, 8]),
      segIds: new Int32Array(2),
    });
    const p0 = Math.E / (Math.E + 1), p1 = 1 / (Math.E + 1);
    const row = [1, 2, 3, 4].map((x) => p0 * x + p1 * (x + 4));
    expectClose(r.out!, [...row, ...row]);
    expectClose(r.lse!, [Math.log(Math.E + 1), Math.log(Math.E + 1)]);
  });

  it('matches a naive softmax over the score matrix', () => {
    const a = attrs({ seqLen: 5, heads: 1, kvHeads: 1, headDim: 8, scale: 0.3 });
    const x = randomInputs(a, 1);
    const r = forward(a, x);
    const { seqLen: T, headDim: D } = a;
    for (let i = 0; i < T; i++) {
      const e: number[] = [];
      for (let j = 0; j < T; j++) {
        let s = 0;
        for (let d = 0; d < D; d++) s += x.q![i * D + d]! * x.k![j * D + d]!;
        e.push(Math.exp(a.scale * s));
      }
      const z = e.reduce((u, w) => u + w, 0);
      expect(r.lse![i]).toBeCloseTo(Math.log(z), 12);
      for (let d = 0; d < D; d++) {
        let o = 0;
        for (let j = 0; j < T; j++) o += (e[j]! / z) * x.v![j * D + d]!;
        expect(r.out![i * D + d]).toBeCloseTo(o, 12);
      }
    }
  });

  it('causal with T=1 returns v (each q head its kv head)', () => {
    const a = attrs({ batch: 2, seqLen: 1, heads: 4, kvHeads: 2, causal: true });
    const x = randomInputs(a, 2);
    const r = forward(a, x);
    const D = a.headDim;
    for (let b = 0; b < 2; b++) {
      for (let h = 0; h < 4; h++) {
        const kvh = Math.floor(h / 2);
        expectClose(r.out!.slice((b * 4 + h) * D, (b * 4 + h + 1) * D), x.v!.slice((b * 2 + kvh) * D, (b * 2 + kvh + 1) * D));
        let s = 0;
        for (let d = 0; d < D; d++) s += x.q![(b * 4 + h) * D + d]! * x.k![(b * 2 + kvh) * D + d]!;
        expect(r.lse![b * 4 + h]).toBeCloseTo(a.scale * s, 12);
      }
    }
  });

  for (const causal of [false, true]) {
    it(`grouped-query equals multi-head with k, v repeated (${causal ? 'causal' : 'bidirectional'}), forward and backward`, () => {
      const gqa = attrs({ batch: 2, seqLen: 7, heads: 4, kvHeads: 2, causal });
      const mha = { ...gqa, kvHeads: 4 };
      const x = randomInputs(gqa, 3, Int32Array.from([0, 0, 0, 1, 1, 1, 1, 5, 5, 5, 5, 5, 6, 6]));
      const { batch: B, seqLen: T, headDim: D } = gqa;
      const repeat = (t: ArrayLike<number>) => {
        const r = new Float64Array(B * T * 4 * D);
        for (let bt = 0; bt < B * T; bt++) {
          for (let h = 0; h < 4; h++) for (let d = 0; d < D; d++) r[(bt * 4 + h) * D + d] = t[(bt * 2 + Math.floor(h / 2)) * D + d]!;
        }
        return r;
      };
      const xm = { ...x, k: repeat(x.k!), v: repeat(x.v!) };
      const fg = forward(gqa, x), fm = forward(mha, xm);
      expectClose(fg.out!, fm.out!);
      expectClose(fg.lse!, fm.lse!);
      const bg = backward(gqa, x), bm = backward(mha, xm);
      expectClose(bg.dq!, bm.dq!);
      // dk, dv of a kv head: the sum over the q heads sharing it.
      const sumGroups = (t: ArrayLike<number>) => {
        const r = new Float64Array(B * T * 2 * D);
        for (let bt = 0; bt < B * T; bt++) {
          for (let h = 0; h < 4; h++) for (let d = 0; d < D; d++) r[(bt * 2 + Math.floor(h / 2)) * D + d] += t[(bt * 4 + h) * D + d]!;
        }
        return r;
      };
      expectClose(bg.dk!, sumGroups(bm.dk!), 1e-10);
      expectClose(bg.dv!, sumGroups(bm.dv!), 1e-10);
    });

    it(`document masks equal running each document alone (${causal ? 'causal' : 'bidirectional'}), forward and backward`, () => {
      const docs = [3, 1, 4, 2]; // lengths; ids 7, 8, 9, 10
      const T = docs.reduce((u, w) => u + w, 0);
      const seg = Int32Array.from(docs.flatMap((n, i) => Array<number>(n).fill(7 + i)));
      const a = attrs({ seqLen: T, heads: 2, kvHeads: 1, causal });
      const x = randomInputs(a, 4, seg);
      const f = forward(a, x), g = backward(a, x);
      const qw = a.heads * a.headDim, kw = a.kvHeads * a.headDim;
      let t0 = 0;
      for (const n of docs) {
        const one = { ...a, seqLen: n };
        const xd: RefArgs = {
          q: sliceRows(x.q!, t0, n, qw), k: sliceRows(x.k!, t0, n, kw), v: sliceRows(x.v!, t0, n, kw),
          segIds: new Int32Array(n), positions: new Int32Array(n), dout: sliceRows(x.dout!, t0, n, qw),
        };
        const fd = forward(one, xd), gd = backward(one, xd);
        expectClose(sliceRows(f.out!, t0, n, qw), fd.out!);
        for (let h = 0; h < a.heads; h++) expectClose(f.lse!.slice(h * T + t0, h * T + t0 + n), fd.lse!.slice(h * n, (h + 1) * n));
        expectClose(sliceRows(g.dq!, t0, n, qw), gd.dq!, 1e-10);
        expectClose(sliceRows(g.dk!, t0, n, kw), gd.dk!, 1e-10);
        expectClose(sliceRows(g.dv!, t0, n, kw), gd.dv!, 1e-10);
        t0 += n;
      }
    });
  }
});

describe('attention argument checks', () => {
  const cpu = new CpuBackend();
  const good = attrs({ batch: 2, seqLen: 5, heads: 4, kvHeads: 2, headDim: 8 });

  function tensorsFor(a: AttentionAttrs, override: Record<string, readonly number[]> = {}) {
    const shapes = { ...attention.shapes(a), ...override };
    return {
      q: cpu.alloc(shapes.q!, 'f32'), k: cpu.alloc(shapes.k!, 'f32'), v: cpu.alloc(shapes.v!, 'f32'),
      segIds: cpu.alloc(shapes.segIds!, 'i32'), out: cpu.alloc(shapes.out!, 'f32'), lse: cpu.alloc(shapes.lse!, 'f32'),
    };
  }

  function errorOf(f: () => unknown): MdlmError {
    try {
      f();
    } catch (e) {
      expect(e).toBeInstanceOf(MdlmError);
      return e as MdlmError;
    }
    throw new Error('expected an MdlmError');
  }

  it('accepts the declared shapes', () => {
    expect(() => validateCall(attention, tensorsFor(good), good)).not.toThrow();
  });

  it('names the op, the argument and both shapes for a wrong shape', () => {
    const e = errorOf(() => validateCall(attention, tensorsFor(good, { k: [2, 5, 4, 8] }), good));
    expect(e.code).toBe('BAD_SHAPE');
    expect(e.message).toMatch(/attention: argument 'k' expected shape \[2, 5, 2, 8\], got \[2, 5, 4, 8\]/);
    const l = errorOf(() => validateCall(attention, tensorsFor(good, { lse: [2, 5, 4] }), good));
    expect(l.message).toMatch(/attention: argument 'lse' expected shape \[2, 4, 5\], got \[2, 5, 4\]/);
  });

  it('rejects bad attributes, naming op and attribute', () => {
    const bad: [Partial<AttentionAttrs>, RegExp][] = [
      [{ kvHeads: 3 }, /attention: attribute 'kvHeads' is 3; heads \(4\) must be a multiple of kvHeads/],
      [{ headDim: 130 }, /attention: attribute 'headDim' is 130; expected a multiple of 4 up to 128/],
      [{ headDim: 6 }, /attention: attribute 'headDim' is 6/],
      [{ scale: 0 }, /attention: attribute 'scale' is 0/],
      [{ seqLen: 0 }, /attention: attribute 'seqLen' is 0/],
    ];
    for (const [over, msg] of bad) {
      const a = { ...good, ...over };
      expect(errorOf(() => attention.validate!(a)).message).toMatch(msg);
    }
    expect(errorOf(() => attentionBackward.validate!({ ...good, kvHeads: 3 })).message).toMatch(/^attention_backward: attribute 'kvHeads'/);
    expect(errorOf(() => attentionBackward.validate!({ ...good, gradStride: 28 })).message).toMatch(/^attention_backward: attribute 'gradStride' is 28; expected a multiple of 4 of at least heads · headDim \(32\)/);
    expect(errorOf(() => attentionBackward.validate!({ ...good, ropeBase: 1 })).message).toMatch(/^attention_backward: attribute 'ropeBase' is 1/);
    expect(errorOf(() => attentionBackward.validate!({ ...good, headDim: 12, ropeBase: 1e4 })).message).toMatch(/attribute 'headDim' is 12; expected a multiple of 8 with gradStride or ropeBase/);
  });

  it('lets dq, dk and dv interleave in the rows of one fused q/k/v gradient, but not overlap', () => {
    // rows of [q heads | k heads | v heads]: 4·8, 2·8 and 2·8 elements, 64 a row
    const a = { ...good, gradStride: 64, ropeBase: 1e4 };
    const rows = a.batch * a.seqLen, grad = cpu.alloc([rows * 64], 'f32');
    const part = (offset: number, width: number) => cpu.view(grad, offset, [(rows - 1) * 64 + width]);
    const shapes = attentionBackward.shapes(a);
    const inputs = {
      ...tensorsFor(a), out: cpu.alloc(shapes.out!, 'f32'), dout: cpu.alloc(shapes.dout!, 'f32'), positions: cpu.alloc(shapes.positions!, 'i32'),
    };
    expect(() => validateCall(attentionBackward, { ...inputs, dq: part(0, 32), dk: part(32, 16), dv: part(48, 16) }, a)).not.toThrow();
    // dk starting inside dq's columns, and dv on dk's
    expect(errorOf(() => validateCall(attentionBackward, { ...inputs, dq: part(0, 32), dk: part(24, 16), dv: part(48, 16) }, a)).message).toMatch(/output 'dq' overlaps argument 'dk'/);
    expect(errorOf(() => validateCall(attentionBackward, { ...inputs, dq: part(0, 32), dk: part(32, 16), dv: part(40, 16) }, a)).message).toMatch(/output 'dk' overlaps argument 'dv'/);
  });
});

describe('attention sampled inputs', () => {
  const docsPerRow = (seg: Int32Array, B: number, T: number) =>
    Array.from({ length: B }, (_, b) => new Set(seg.subarray(b * T, (b + 1) * T)).size);

  it('bench cases pack one document a row (the work of the SDPA peer) except the documents row', () => {
    for (const c of attention.cases('bench')) {
      // the sample at the case's shape is large; its segment ids depend only on batch, seqLen and documents
      const a = { ...c.attrs, heads: 1, kvHeads: 1, headDim: 4 };
      const seg = attention.sample(new PhiloxStream(3, RngPurpose.harness), a).segIds as Int32Array;
      const docs = docsPerRow(seg, a.batch, a.seqLen);
      if (c.label.includes('documents')) expect(docs.slice(0, 3), c.label).toEqual([1, 2, 3]);
      else expect(docs.every((n) => n === 1), c.label).toBe(true);
    }
  });

  it('test cases keep rows of 1, 2 and 3 documents', () => {
    const c = attention.cases('test').find((x) => x.label.startsWith('documents causal'))!;
    const seg = attention.sample(new PhiloxStream(5, RngPurpose.harness), c.attrs).segIds as Int32Array;
    expect(docsPerRow(seg, c.attrs.batch, c.attrs.seqLen)).toEqual([1, 2, 3]);
  });
});
