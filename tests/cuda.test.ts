/**
 * The CUDA backend on a GPU: the backend contracts; every op of the registry against the float64
 * reference, in bf16 and in f32 where the op takes them; casts bit for bit with src/convert.ts over
 * every 16- and 8-bit code and random f32 bit patterns; the same bits from every run of the
 * reductions and the scatter-add; unaligned views; errors; 20 training steps of each objective in
 * bf16 whose losses track the CPU's in f32. Without a GPU or without the built
 * addon the tests skip and say why; with MDLM_REQUIRE_CUDA=1 (bench/cuda-run.sh) that fails.
 * The kernels other GPUs run are tested here too, on a Hopper GPU, through a backend with the
 * Hopper kernels off (CudaBackendOptions.hopperKernels). The backend's own TypeScript also runs
 * everywhere, over a simulated device (tests/support).
 */
import { afterAll, describe, expect, it } from 'vitest';
import { CpuBackend } from '../src/backend/cpu/cpu.js';
import { CudaBackend, type CudaBackendOptions } from '../src/backend/cuda/cuda.js';
import { bf16ToF32, bitsF32, e4m3ToF32, e5m2ToF32, f16ToF32, f32Bits, f32ToBf16, f32ToE4m3, f32ToE5m2, f32ToF16 } from '../src/convert.js';
import { checkParity, freshSeed, parityDtypes, relativeError, uploadBackwardFromForward } from '../src/harness/parity.js';
import { type AttentionAttrs, attention, attentionBackward } from '../src/ops/attention.js';
import { CAST_DTYPES, type CastAttrs, cast } from '../src/ops/cast.js';
import { type CrossEntropyAttrs, crossEntropyFused } from '../src/ops/cross_entropy.js';
import { embeddingBackward } from '../src/ops/embedding.js';
import { gradNorm } from '../src/ops/grad_norm.js';
import { OPS } from '../src/ops/index.js';
import { matmul, matmulAttrs } from '../src/ops/matmul.js';
import { matmulFp8, matmulFp8Attrs } from '../src/ops/matmul_fp8.js';
import { matmulSwiglu, matmulSwigluBackward } from '../src/ops/matmul_swiglu.js';
import { type MatmulRopeAttrs, matmulRope } from '../src/ops/matmul_rope.js';
import { samplePositions } from '../src/ops/rope.js';
import { swiglu } from '../src/ops/swiglu.js';
import { type OpDef, randn } from '../src/ops/op.js';
import { type ReduceAttrs, reduce } from '../src/ops/reduce.js';
import { PhiloxStream, RngPurpose } from '../src/rng/philox.js';
import { createBackend, loadCudaAddon, probeCuda } from '../src/runtime/backends.js';
import { resolveConfig } from '../src/config/load.js';
import { LlamaModel } from '../src/model/llama.js';
import { AdamW } from '../src/optim/adamw.js';
import { DTYPE_BYTES, type FloatDType, type Tensor } from '../src/tensor.js';
import { contracts, expectMdlmError } from './support/contracts.js';
import { lossWeights, tokenBatch } from './support/model_batch.js';
import { simulatedCudaAddon } from './support/simulated_cuda.js';
import { expectCrossEntropyInPlace } from './support/in_place.js';
import { expectBf16Tracks, runLosses, tinyConfig, tinyRunRoot, tinyTrainer } from './support/train.js';

const probe = probeCuda();
if (!probe.available) {
  if (process.env.MDLM_REQUIRE_CUDA === '1') throw new Error(`CUDA is required (MDLM_REQUIRE_CUDA=1) but unavailable: ${probe.reason}`);
  console.warn(`[mdlm tests] skipping CUDA tests: ${probe.reason}`);
}
const hasCuda = probe.available;

let opened: CudaBackend | undefined;
async function cuda(): Promise<CudaBackend> {
  opened ??= (await createBackend('cuda')) as CudaBackend;
  return opened;
}

afterAll(() => opened?.destroy());

/** Another backend on the same addon (and device), with other kernel settings: it takes the default backend's tensors. */
const others = new Map<string, CudaBackend>();
function cudaWith(options: CudaBackendOptions): CudaBackend {
  const key = JSON.stringify(options);
  if (!others.has(key)) others.set(key, new CudaBackend(loadCudaAddon().addon!, options));
  return others.get(key)!;
}

/** The kernels Ampere and Ada run, on this GPU. */
const beforeHopper = (): CudaBackend => cudaWith({ hopperKernels: false });


describe.skipIf(hasCuda)('cuda', () => {
  it.skip(`skipped: ${probe.reason}`, () => {});
});

contracts('cuda', async () => (hasCuda ? cuda() : null), hasCuda);
contracts('cuda on a simulated device', async () => new CudaBackend(simulatedCudaAddon()), true);

describe('cuda backend on a simulated device', () => {
  it('hands kernels the right pointers, dtypes and attributes (parity through the references)', async () => {
    const b = new CudaBackend(simulatedCudaAddon());
    for (const name of ['cast', 'matmul', 'embedding_backward', 'diffusion_mask', 'reduce', 'adamw', 'swiglu']) {
      const op = OPS.find((o) => o.name === name)!;
      for (const c of op.cases('test').slice(0, 4)) {
        for (const dtype of parityDtypes(op, b, ['bf16', 'f32'])) {
          const r = await checkParity(b, op, c, { seed: freshSeed(), dtype });
          expect(r.error, JSON.stringify(r)).toBeUndefined();
          expect(r.relErr, JSON.stringify(r)).toBeLessThanOrEqual(r.tol);
        }
      }
    }
  });

  it("gives a training pass the CPU's loss and gradient bits (strided outputs write their rows only)", async () => {
    // The fused q/k/v layer writes dq, dk and dv interleaved into one gradient matrix.
    const cfg = resolveConfig({ preset: 'tiny', overrides: { 'model.dModel': '64', 'model.nLayers': '2', 'model.nHeads': '4', 'model.ffnHidden': '96', 'model.seqLen': '24' } });
    const N = 2 * 24;
    const pass = async (b: CpuBackend | CudaBackend) => {
      const m = new LlamaModel(b, cfg.model, 2, 3);
      expect(m.blocks[0]!.attn.fused).toBe(true);
      m.setBatch({ inputs: Int32Array.from({ length: N }, (_, i) => (i * 7 + 1) % 256), targets: Int32Array.from({ length: N }, (_, i) => (i * 13 + 4) % 256), segIds: new Int32Array(N), positions: Int32Array.from({ length: N }, (_, i) => i % 24) }, false);
      m.forwardBackward(true);
      const out = { loss: await m.loss(), grad: Array.from((await b.download(m.store.grad)) as Float32Array) };
      m.destroy();
      return out;
    };
    const sim = new CudaBackend(simulatedCudaAddon());
    // The pool hands the second model the first's buffers: stale values in the gaps too.
    await pass(sim);
    expect(await pass(sim)).toEqual(await pass(new CpuBackend()));
  });

  it('whenAbove: an error inside a recorded conditional region is the one reported, and the capture closes', async () => {
    const b = new CudaBackend(simulatedCudaAddon());
    const count = b.alloc([1], 'i32');
    const y = b.alloc([3], 'f32');
    expect(() => b.record(() => b.whenAbove(count, 0, () => {
      throw new Error('boom inside the region');
    }))).toThrow('boom inside the region');
    // Nothing left open: host work and a new recording go through.
    b.upload(count, Int32Array.from([1]));
    b.upload(y, new Float32Array(3).fill(5));
    const rec = b.record(() => b.whenAbove(count, 0, () => b.zero(y)));
    rec.replay();
    expect(Array.from((await b.download(y)) as Float32Array)).toEqual([0, 0, 0]);
    rec.destroy();
    [count, y].forEach((t) => b.free(t));
  });

  it('runs cross_entropy_backward in place on the simulated device', async () => {
    await expectCrossEntropyInPlace(new CudaBackend(simulatedCudaAddon()), 'bf16');
  });

  it('refuses host work while recording a CUDA graph, and closes the capture when it does', async () => {
    const b = new CudaBackend(simulatedCudaAddon());
    const [x, y] = [b.alloc([5], 'f32'), b.alloc([5], 'f32')];
    for (const bad of [() => b.upload(x, new Float32Array(5)), () => b.alloc([4], 'f32'), () => b.free(y), () => void b.sync(), () => void b.download(x)]) {
      await expectMdlmError(() => b.record(bad), 'BAD_ARGUMENT', 'while recording a CUDA graph');
    }
    b.upload(y, new Float32Array(5).fill(1)); // no capture was left open
    const rec = b.record(() => b.zero(y));
    expect(rec.native).toBe(true);
    rec.replay();
    expect(Array.from((await b.download(y)) as Float32Array)).toEqual([0, 0, 0, 0, 0]);
    rec.destroy();
    [x, y].forEach((t) => b.free(t));
  });

  it('trains with forward and backward replayed from a CUDA graph: the losses of the unrecorded steps, far fewer kernel calls', async () => {
    const { root, dataDir, remove } = await tinyRunRoot('mdlm-graph-');
    try {
      const losses: number[][] = [];
      const calls: number[][] = [];
      for (const graphs of ['false', 'true']) {
        const addon = simulatedCudaAddon();
        let count = 0;
        const counted = { ...addon, run: (...a: Parameters<typeof addon.run>) => ((count += 1), addon.run(...a)) };
        const cfg = tinyConfig(root, dataDir, `graphs-${graphs}`, {
          'objective.kind': 'mdlm', 'train.steps': '4', 'train.cudaGraphs': graphs, 'train.evalBatches': '1', 'model.nLayers': '1', 'model.seqLen': '32', 'train.batchSize': '2',
        });
        const t = await tinyTrainer(cfg, new CudaBackend(counted));
        const perStep: number[] = [];
        const { losses: l } = await (async () => {
          const original = t.model.forwardBackward.bind(t.model);
          t.model.forwardBackward = (overwriteGrads?: boolean) => {
            const before = count;
            original(overwriteGrads);
            perStep.push(count - before);
          };
          return t.run();
        })();
        t.destroy();
        losses.push([...l]);
        calls.push(perStep);
      }
      // Recorded, the mdlm loss rows are packed (train.lossRows weighted): the same losses.
      expect(losses[1]).toEqual(losses[0]);
      // Unrecorded: every step calls every kernel. Recorded: a direct run, the recording (the same
      // calls, captured into the graph; three more than unrecorded: packing and unpacking the loss
      // rows), then replays that call none.
      expect(calls[0]!.every((c) => c > 20)).toBe(true);
      expect(calls[1]!.slice(0, 2)).toEqual(calls[0]!.slice(0, 2).map((c) => c + 3));
      expect(calls[1]!.slice(2)).toEqual([0, 0]);
    } finally {
      remove();
    }
  }, 120_000);

  it('moves raw bytes both ways and decodes narrow floats as src/convert.ts', async () => {
    const b = new CudaBackend(simulatedCudaAddon());
    const base = b.alloc([300], 'fp8e4m3');
    const codes = Uint8Array.from({ length: 256 }, (_, i) => i);
    const v = b.view(base, 17, [256]);
    b.uploadBytes(v, codes);
    expect(await b.downloadBytes(v)).toEqual(codes);
    const got = Array.from((await b.download(v)) as Float32Array);
    expect(got.map((x) => (Number.isNaN(x) ? 'NaN' : x))).toEqual(Array.from(codes, (c) => (Number.isNaN(e4m3ToF32(c)) ? 'NaN' : e4m3ToF32(c))));
    await expectMdlmError(() => b.uploadBytes(v, codes.subarray(1)), 'BAD_SHAPE', '256 bytes');
    b.free(base);
  });

  it("hands the addon each backend's kernel settings before that backend's runs, and only when they change", async () => {
    const addon = simulatedCudaAddon();
    let configures = 0;
    const counted = { ...addon, configure: (...a: Parameters<typeof addon.configure>) => ((configures += 1), addon.configure(...a)) };
    const hopper = new CudaBackend(counted);
    const other = new CudaBackend(counted, { hopperKernels: false, gemmAutotune: 0 });
    expect(hopper.kernelSettings).toEqual({ hopperKernels: true, gemmAutotune: 8 });
    const x = hopper.alloc([4, 1], 'f32'), out = hopper.alloc([4], 'f32');
    hopper.upload(x, Float32Array.from([1, -2, 3, -4]));
    const step = (b: CudaBackend): void => b.run(reduce, { x, out: out }, { rows: 4, cols: 1, kind: 'sum' });
    step(hopper);
    step(hopper);
    step(other);
    step(hopper);
    hopper.configureKernels({ gemmAutotune: 3 });
    step(hopper);
    expect(addon.runSettings()).toEqual([
      { hopperKernels: true, gemmAutotune: 8 }, { hopperKernels: true, gemmAutotune: 8 }, { hopperKernels: false, gemmAutotune: 0 },
      { hopperKernels: true, gemmAutotune: 8 }, { hopperKernels: true, gemmAutotune: 3 },
    ]);
    expect(configures).toBe(4);
    await expectMdlmError(() => hopper.configureKernels({ gemmAutotune: 65 }), 'BAD_ARGUMENT', 'gemmAutotune');
    await expectMdlmError(() => new CudaBackend(counted, { gemmAutotune: 1.5 }), 'BAD_ARGUMENT', 'gemmAutotune');
    [x, out].forEach((t) => hopper.free(t));
  });

  it('turns addon errors that carry a code into MdlmErrors', async () => {
    const b = new CudaBackend(simulatedCudaAddon());
    await expectMdlmError(() => b.alloc([2 ** 29], 'f32'), 'OUT_OF_MEMORY', 'free of');
    expect(b.poolStats().liveBytes).toBe(0);
  });
});

describe.runIf(hasCuda)('cuda parity over the registry', () => {
  it('has a kernel for every op', async () => {
    const b = await cuda();
    expect(OPS.filter((o) => !b.supports(o.name)).map((o) => o.name)).toEqual([]);
  });

  for (const op of OPS) {
    for (const c of op.cases('test')) {
      it(`${op.name}: ${c.label}`, async (ctx) => {
        const b = await cuda();
        if (!b.supports(op.name)) ctx.skip(); // listed by the test above
        for (const dtype of parityDtypes(op, b, ['bf16', 'f32'])) {
          const r = await checkParity(b, op, c, { seed: freshSeed(), dtype });
          expect(r.error, JSON.stringify(r)).toBeUndefined();
          expect(r.relErr, JSON.stringify(r)).toBeLessThanOrEqual(r.tol);
        }
      });
    }
  }
});

// --- bit-level helpers ---

const DECODE: Record<FloatDType, (code: number) => number> = {
  f32: bitsF32, bf16: bf16ToF32, f16: f16ToF32, fp8e4m3: e4m3ToF32, fp8e5m2: e5m2ToF32,
};
const ENCODE: Record<FloatDType, (x: number) => number> = {
  f32: f32Bits, bf16: f32ToBf16, f16: f32ToF16, fp8e4m3: f32ToE4m3, fp8e5m2: f32ToE5m2,
};

function codesToBytes(dtype: FloatDType, codes: ArrayLike<number>): Uint8Array {
  const n = codes.length;
  const arr = DTYPE_BYTES[dtype] === 4 ? Uint32Array.from(codes) : DTYPE_BYTES[dtype] === 2 ? Uint16Array.from(codes) : Uint8Array.from(codes);
  return new Uint8Array(arr.buffer, 0, n * DTYPE_BYTES[dtype]);
}

function bytesToCodes(dtype: FloatDType, bytes: Uint8Array): ArrayLike<number> {
  const n = bytes.byteLength / DTYPE_BYTES[dtype];
  const copy = bytes.slice().buffer;
  return DTYPE_BYTES[dtype] === 4 ? new Uint32Array(copy, 0, n) : DTYPE_BYTES[dtype] === 2 ? new Uint16Array(copy, 0, n) : new Uint8Array(copy, 0, n);
}

/** Every code of a narrow format; for f32, specials (zeros, infinities, NaNs, subnormals, ties) and random patterns. */
function inputCodes(dtype: FloatDType): number[] {
  if (dtype !== 'f32') return Array.from({ length: 2 ** (8 * DTYPE_BYTES[dtype]) }, (_, i) => i);
  const rng = new PhiloxStream(7, RngPurpose.harness);
  const codes = [0, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00001, 0x7f800001, 0x00000001, 0x807fffff, 0x7f7fffff, 0x477ff000, 0x477fefff, 0x43e00000, 0x43f00000];
  for (let i = 0; i < 1 << 18; i++) {
    const u = rng.nextU32();
    // Every fourth pattern has its low 13 or 16 bits at a tie for f16 or bf16.
    codes.push(i % 4 === 1 ? ((u & ~0xffff) | 0x8000) >>> 0 : i % 4 === 2 ? ((u & ~0x1fff) | 0x1000) >>> 0 : u);
  }
  return codes;
}

async function castOnCuda(b: CudaBackend, from: FloatDType, to: FloatDType, codes: readonly number[]): Promise<ArrayLike<number>> {
  const n = codes.length;
  const x = b.alloc([n], from);
  const out = b.alloc([n], to);
  try {
    b.uploadBytes(x, codesToBytes(from, codes));
    b.run(cast, { x, out }, { n, from, to } as CastAttrs);
    return bytesToCodes(to, await b.downloadBytes(out));
  } finally {
    b.free(x);
    b.free(out);
  }
}

describe.runIf(hasCuda)('cuda specifics', () => {
  it('casts every bf16, f16 and fp8 code and random f32 patterns bit for bit as src/convert.ts', async () => {
    const b = await cuda();
    for (const from of CAST_DTYPES) {
      const codes = inputCodes(from);
      for (const to of CAST_DTYPES) {
        const got = await castOnCuda(b, from, to, codes);
        const bad: string[] = [];
        for (let i = 0; i < codes.length && bad.length < 5; i++) {
          const x = DECODE[from](codes[i]!);
          // A cast to its own dtype is a copy, NaN payloads and all. A NaN decoded to f32 is any NaN
          // (JavaScript numbers do not keep NaN payloads).
          const want = from === to ? codes[i]! : ENCODE[to](x);
          const ok = from !== to && to === 'f32' && Number.isNaN(x) ? Number.isNaN(bitsF32(got[i]!)) : got[i] === want;
          if (!ok) bad.push(`${from} 0x${codes[i]!.toString(16)} -> ${to}: got 0x${got[i]!.toString(16)}, want 0x${want.toString(16)}`);
        }
        expect(bad, `${from} -> ${to}`).toEqual([]);
      }
    }
  });

  it('gives the same bits on every run of the reductions and the scatter-add', async () => {
    const b = await cuda();
    const rng = new PhiloxStream(11, RngPurpose.harness);
    const input = (shape: number[], dtype: 'f32' | 'bf16'): Tensor => {
      const t = b.alloc(shape, dtype);
      b.upload(t, Float32Array.from({ length: t.size }, () => rng.normal()));
      return t;
    };
    const x = input([3, 100003], 'f32');
    const sums = b.alloc([3], 'f32');
    const g = input([1 << 20], 'f32');
    const norm = b.alloc([2], 'f32');
    // 50 ids over 8192 positions: ~160 terms a row, where the summation order shows in the bits.
    const tokens = 8192, vocab = 50, dim = 96;
    const ids = b.alloc([tokens], 'i32');
    b.upload(ids, Int32Array.from({ length: tokens }, () => rng.int(vocab)));
    const dout = input([tokens, dim], 'bf16');
    const dtable = b.alloc([vocab, dim], 'bf16');
    const runs: [string, () => Tensor][] = [
      ['reduce', () => (b.run(reduce, { x, out: sums }, { rows: 3, cols: 100003, kind: 'sum' }), sums)],
      ['grad_norm', () => (b.run(gradNorm, { x: g, out: norm }, { n: 1 << 20, maxNorm: 1 }), norm)],
      ['embedding_backward', () => (b.run(embeddingBackward, { ids, dout, dtable }, { tokens, vocab, dim, accumulate: false, outF32: false }), dtable)],
    ];
    for (const [name, run] of runs) {
      const first = await b.downloadBytes(run());
      for (let i = 0; i < 3; i++) expect(await b.downloadBytes(run()), name).toEqual(first);
    }
    [x, sums, g, norm, ids, dout, dtable].forEach((t) => b.free(t));
  });

  // matmul_swiglu and matmul_swiglu_backward through cuda/gemm/gemm_ws.cuh's SwiGLU epilogues
  // (Hopper's) against the same ops unfused (the Hopper kernels off: matmul, then swiglu or
  // swiglu_backward, as other GPUs run them) at llama-sized shapes, several tiles an SM with a long k: a race
  // between a consumer's reads of its G and U buffer and the next TMA load into it shows as a
  // difference far above the two paths' own (the same bf16 roundings: about 1e-5 on the H100).
  // The two shapes take the forward's two forms (gemm::swiglu_epilogue: 6.9e10 FLOP the deep
  // one, 6.9e11 the other).
  it('gives matmul_swiglu and matmul_swiglu_backward fused what they give unfused, to 1e-4, at F=2048, 8192 rows, k=1024 and F=8192, k=2560', async (ctx) => {
    const b = await cuda();
    if (!b.info.sm?.startsWith('9.')) ctx.skip(`sm ${b.info.sm}: the fused kernels are for sm 9.0`);
    const rng = new PhiloxStream(29, RngPurpose.harness);
    const upload = (shape: number[], scale: number) => {
      const t = b.alloc(shape, 'bf16');
      b.upload(t, Float32Array.from(randn(rng, shape[0]! * shape[1]!, scale)));
      return t;
    };
    for (const attrs of [{ hidden: 2048, rows: 8192, k: 1024 }, { hidden: 8192, rows: 8192, k: 2560 }]) {
      const F = attrs.hidden, R = attrs.rows, K = attrs.k;
      const fwd = { wgu: upload([2 * F, K], 1 / 32), x: upload([R, K], 1), gu: b.alloc([2 * F, R], 'bf16'), out: b.alloc([F, R], 'bf16') };
      const bwd = { wdown: upload([K, F], 1 / 32), dout: upload([R, K], 1), gu: upload([2 * F, R], 2), dgu: b.alloc([2 * F, R], 'bf16') };
      const outputs = async (on: CudaBackend) => {
        on.run(matmulSwiglu, fwd, attrs);
        on.run(matmulSwigluBackward, bwd, attrs);
        return Promise.all([fwd.gu, fwd.out, bwd.dgu].map(async (t) => (await b.download(t)) as Float32Array));
      };
      try {
        const fused = await outputs(b);
        const unfused = await outputs(beforeHopper());
        fused.forEach((got, i) => expect(relativeError(got, unfused[i]!, false), `${['gu', 'out', 'dgu'][i]} at F=${F}`).toBeLessThanOrEqual(1e-4));
      } finally {
        [...Object.values(fwd), ...Object.values(bwd)].forEach((t) => b.free(t));
      }
    }
  });

  // matmul_rope through cuda/gemm/gemm_ws.cuh's rope epilogue (Hopper's) against the reference at
  // the registry's cases, and against the same op unfused (matmul, then rope: the Hopper kernels
  // off) at llama-sized shapes: head dim 64 (cooperative 256-wide
  // tiles) and 128 with grouped-query k (q's 2048 columns, k's 512). The paths differ by one bf16
  // rounding of the product (the unfused rounds it before rope turns it), about 1e-3; a wrong
  // angle, pairing or part is of order 1. Positions run past the rope table's 4096
  // (samplePositions starts rows anywhere below 4096), so the epilogue's computed angles are held
  // to the table's as well.
  it('gives matmul_rope fused the reference at its cases, and what it gives unfused, to 4e-3, at head dims 64 and 128', async (ctx) => {
    const b = await cuda();
    if (!b.info.sm?.startsWith('9.')) ctx.skip(`sm ${b.info.sm}: the fused kernel is for sm 9.0`);
    const shapes: MatmulRopeAttrs[] = [
      { batch: 4, seqLen: 1024, heads: 12, kvHeads: 12, headDim: 64, base: 10000, inFeatures: 768 },
      { batch: 2, seqLen: 2048, heads: 16, kvHeads: 4, headDim: 128, base: 500000, inFeatures: 2048 },
    ];
    const rng = new PhiloxStream(31, RngPurpose.harness);
    for (const c of matmulRope.cases('test')) {
      const r = await checkParity(b, matmulRope, c, { seed: freshSeed(), dtype: 'bf16' });
      expect(r.error, JSON.stringify(r)).toBeUndefined();
      expect(r.relErr, JSON.stringify(r)).toBeLessThanOrEqual(r.tol);
    }
    for (const a of shapes) {
      const rows = a.batch * a.seqLen, n = (a.heads + a.kvHeads) * a.headDim;
      const x = b.alloc([rows, a.inFeatures], 'bf16'), w = b.alloc([n, a.inFeatures], 'bf16'), positions = b.alloc([a.batch, a.seqLen], 'i32');
      const q = b.alloc([a.batch, a.seqLen, a.heads, a.headDim], 'bf16'), k = b.alloc([a.batch, a.seqLen, a.kvHeads, a.headDim], 'bf16');
      b.upload(x, Float32Array.from(randn(rng, rows * a.inFeatures)));
      b.upload(w, Float32Array.from(randn(rng, n * a.inFeatures, 1 / Math.sqrt(a.inFeatures))));
      b.upload(positions, samplePositions(rng, a));
      const outputs = async (fused: boolean) => {
        (fused ? b : beforeHopper()).run(matmulRope, { x, w, positions, q, k }, a);
        return Promise.all([q, k].map(async (t) => (await b.download(t)) as Float32Array));
      };
      try {
        const fused = await outputs(true), unfused = await outputs(false);
        fused.forEach((got, i) => expect(relativeError(got, unfused[i]!, false), `${['q', 'k'][i]} at head dim ${a.headDim}`).toBeLessThanOrEqual(4e-3));
      } finally {
        [x, w, positions, q, k].forEach((t) => b.free(t));
      }
    }
  });

  it('runs the deterministic attention backward (the op\'s deterministic attribute) within tolerance, with the same bits every run, close to the default, on the Hopper kernels and the others', async () => {
    const b = await cuda();
    const downloadGrads = async (t: Record<string, Tensor>) => Promise.all(['dq', 'dk', 'dv'].map(async (n) => (await b.download(t[n]!)) as Float32Array));
    for (const c of attentionBackward.cases('test')) {
      const r = await checkParity(b, attentionBackward, { ...c, attrs: { ...c.attrs, deterministic: true } }, { seed: freshSeed(), dtype: 'bf16' });
      expect(r.error, JSON.stringify(r)).toBeUndefined();
      expect(r.relErr, JSON.stringify(r)).toBeLessThanOrEqual(r.tol);
    }
    // Several key blocks add to each dQ row: where the default kernel's atomics would show.
    const attrs: AttentionAttrs = { batch: 2, seqLen: 700, heads: 4, kvHeads: 2, headDim: 64, causal: true, scale: 0.125 };
    const deterministic = { ...attrs, deterministic: true };
    const t: Record<string, Tensor> = {};
    expect(uploadBackwardFromForward(b, attentionBackward, attrs, 'bf16', new PhiloxStream(13, RngPurpose.harness), t)).toBe(true);
    try {
      for (const on of [b, beforeHopper()]) {
        on.run(attentionBackward, t, deterministic);
        const first = await Promise.all(['dq', 'dk', 'dv'].map((n) => b.downloadBytes(t[n]!)));
        for (let i = 0; i < 3; i++) {
          on.run(attentionBackward, t, deterministic);
          expect(await Promise.all(['dq', 'dk', 'dv'].map((n) => b.downloadBytes(t[n]!)))).toEqual(first);
        }
        const det = await downloadGrads(t);
        on.run(attentionBackward, t, attrs);
        const fused = await downloadGrads(t);
        // Both round dS and P to bf16 alike; only dQ's summation order (and its one rounding) differ.
        fused.forEach((g, i) => expect(relativeError(g, det[i]!, false), ['dq', 'dk', 'dv'][i]).toBeLessThanOrEqual(2e-3));
        // dK, dV: the same order of sums.
        for (const i of [1, 2]) expect(relativeError(fused[i]!, det[i]!, false), ['dq', 'dk', 'dv'][i]).toBe(0);
      }
    } finally {
      Object.values(t).forEach((x) => b.free(x));
    }
  });

  it('runs attention forward and backward on the kernels GPUs before Hopper run (hopperKernels false) within tolerance', async () => {
    const other = beforeHopper();
    for (const op of [attention, attentionBackward]) {
      for (const c of op.cases('test')) {
        const r = await checkParity(other, op as OpDef<AttentionAttrs>, c, { seed: freshSeed(), dtype: 'bf16' });
        expect(r.error, JSON.stringify(r)).toBeUndefined();
        expect(r.relErr, JSON.stringify(r)).toBeLessThanOrEqual(r.tol);
      }
    }
  });

  it('runs recorded passes with each step\'s AdamW update deferred into the next pass\'s graph to the losses, gradients and parameters of updating at the end of each step', async () => {
    const b = await cuda();
    const cfg = resolveConfig({ preset: 'tiny', overrides: { 'model.dModel': '128', 'model.nLayers': '2', 'model.nHeads': '2', 'model.ffnHidden': '256', 'model.seqLen': '128' } }).model;
    const batch = 4, N = batch * 128;
    const rows = tokenBatch(N, 128, { secondDoc: 80 });
    // Eight training steps each, causal and bidirectional in turn (unrecorded, recorded, replayed),
    // each step's AdamW taken over by the next pass (as the Trainer does) or queued at once.
    const passes = async (deferred: boolean) => {
      // The deterministic attention backward, so that the only difference could be where the update runs.
      const m = new LlamaModel(b, cfg, batch, 5, { dtype: 'bf16', record: true, deterministic: true });
      const opt = new AdamW(m.store, { beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1, gradClip: 1 });
      const out: { loss: number; grad: Float32Array }[] = [];
      for (let p = 0; p < 8; p++) {
        m.setBatch({ ...rows, weights: lossWeights(N, 1) }, p % 2 === 0);
        m.forwardBackward(true, opt.takeDeferred());
        out.push({ loss: await m.loss(), grad: (await b.download(m.store.grad)) as Float32Array });
        opt.measure();
        opt.defer(1e-3, p + 1);
        if (!deferred) opt.flush();
      }
      opt.flush();
      const params = (await b.download(m.store.value)) as Float32Array;
      opt.destroy();
      m.destroy();
      return { passes: out, params };
    };
    const now = await passes(false);
    const later = await passes(true);
    expect(now.passes[7]!.grad.reduce((m, x) => Math.max(m, Math.abs(x)), 0)).toBeGreaterThan(0);
    // The updates moved the parameters: a later pass's loss differs from the first's.
    expect(Math.abs(now.passes[6]!.loss - now.passes[0]!.loss)).toBeGreaterThan(1e-3);
    for (const [p, pass] of later.passes.entries()) {
      expect(Math.abs(pass.loss - now.passes[p]!.loss), `pass ${p} loss`).toBeLessThanOrEqual(1e-5 * Math.abs(now.passes[p]!.loss));
      expect(relativeError(pass.grad, now.passes[p]!.grad, false), `pass ${p} gradients`).toBeLessThanOrEqual(1e-5);
    }
    expect(relativeError(later.params, now.params, false), 'parameters after the last update').toBeLessThanOrEqual(1e-6);
  });

  it('runs head-dim-64 attention with many query tiles a key block and several key blocks a row, and the persistent kernels with more blocks than are resident, within tolerance', async () => {
    const b = await cuda();
    // bwd_ws's 128-row steps at head dim 64 (each warpgroup a half of every step's dQ): many steps
    // a block here, with grouped-query heads, and fwd_ws's two blocks an SM many key tiles a row.
    // fwd_ws and bwd_ws are persistent (as many blocks as are resident, each taking tiles until
    // none is left): the last cases' blocks of 128 keys or queries outnumber the resident blocks
    // (the H200's 132 SMs; 264 for fwd_ws at head dim 64, two an SM), at both head dims.
    const attrs: AttentionAttrs = { batch: 2, seqLen: 700, heads: 4, kvHeads: 2, headDim: 64, causal: false, scale: 0.125 };
    const many = (headDim: number): AttentionAttrs => ({ batch: 4, seqLen: 256, heads: 20, kvHeads: 20, headDim, causal: true, scale: 0.125 });
    const manyQueries: AttentionAttrs = { batch: 2, seqLen: 256, heads: 80, kvHeads: 80, headDim: 64, causal: true, scale: 0.125 };
    for (const [op, label, a] of [
      [attention, 'B2 T700 H4/2 D64 bidirectional', attrs],
      [attentionBackward, 'B2 T700 H4/2 D64 bidirectional', attrs],
      [attentionBackward, 'B4 T256 H20 D64 causal', many(64)],
      [attentionBackward, 'B4 T256 H20 D128 causal', many(128)],
      [attention, 'B4 T256 H20 D128 causal', many(128)],
      [attention, 'B2 T256 H80 D64 causal', manyQueries],
    ] as const) {
      const r = await checkParity(b, op as OpDef<AttentionAttrs>, { label, attrs: a }, { seed: freshSeed(), dtype: 'bf16' });
      expect(r.error, JSON.stringify(r)).toBeUndefined();
      expect(r.relErr, JSON.stringify(r)).toBeLessThanOrEqual(r.tol);
    }
  }, 300_000);

  it('runs on views at any element offset (unaligned pointers take the scalar paths)', async () => {
    const b = await cuda();
    const rng = new PhiloxStream(12, RngPurpose.harness);
    const n = 1001;
    const base = b.alloc([3 * n + 8], 'bf16');
    const values = Float32Array.from({ length: 3 * n + 8 }, () => rng.normal());
    b.upload(base, values);
    const [gate, up, out] = [1, n + 3, 2 * n + 6].map((offset) => b.view(base, offset, [1, n]));
    b.run(swiglu, { gate: gate!, up: up!, out: out! }, { rows: 1, hidden: n });
    const stored = (x: number): number => bf16ToF32(f32ToBf16(x));
    const want = new Float64Array(n);
    swiglu.reference({ gate: Float64Array.from(values.subarray(1, 1 + n), stored), up: Float64Array.from(values.subarray(n + 3, 2 * n + 3), stored), out: want }, { rows: 1, hidden: n });
    expect(relativeError((await b.download(out!)) as Float32Array, want, false)).toBeLessThanOrEqual(swiglu.tolerance.bf16!);

    // matmul with a 2-byte-aligned a: cuBLASLt is told the real alignment.
    const [m, k, nn] = [37, 29, 41];
    const mat = b.alloc([1 + m * k + k * nn], 'bf16');
    const host = Float32Array.from({ length: 1 + m * k + k * nn }, () => rng.normal());
    b.upload(mat, host);
    const ma = b.view(mat, 1, [1, m, k]);
    const mb = b.view(mat, 1 + m * k, [1, k, nn]);
    const mo = b.alloc([1, m, nn], 'bf16');
    const attrs = matmulAttrs(1, m, nn, k);
    b.run(matmul, { a: ma, b: mb, out: mo }, attrs);
    const r = (x: number): number => bf16ToF32(f32ToBf16(x));
    const ref = new Float64Array(m * nn);
    matmul.reference({ a: Float64Array.from(host.subarray(1, 1 + m * k), r), b: Float64Array.from(host.subarray(1 + m * k), r), out: ref }, attrs);
    expect(relativeError((await b.download(mo)) as Float32Array, ref, false)).toBeLessThanOrEqual(matmul.tolerance.bf16!);
    [base, mat, mo].forEach((t) => b.free(t));
  });

  it('refuses to move to another GPU (useDevice) once the device is in use', async () => {
    const b = await cuda();
    b.free(b.alloc([1], 'f32'));
    expect(() => loadCudaAddon().addon!.useDevice(0)).toThrow(/in use already/);
  });

  it("runs matmul_fp8 on FP8 tensor cores with per-tensor factors at 4-byte offsets (a meta record's scaleInv)", async () => {
    const b = await cuda();
    const rng = new PhiloxStream(13, RngPurpose.harness);
    const attrs = matmulFp8Attrs(64, 48, 64, 'e4m3', 'e4m3');
    const x = matmulFp8.sample(rng, attrs);
    const a = b.alloc([64, 64], 'fp8e4m3'), w = b.alloc([48, 64], 'fp8e4m3'), out = b.alloc([64, 48], 'bf16');
    const meta = b.alloc([40], 'f32');
    const host = new Float32Array(40).fill(7);
    host[17] = x.aScaleInv![0]!;
    host[22] = x.bScaleInv![0]!;
    b.upload(a, Float32Array.from(x.a!));
    b.upload(w, Float32Array.from(x.b!));
    b.upload(meta, host);
    b.run(matmulFp8, { a, b: w, aScaleInv: b.view(meta, 17, [1]), bScaleInv: b.view(meta, 22, [1]), out }, attrs);
    const want = new Float64Array(64 * 48);
    matmulFp8.reference({ ...x, out: want }, attrs);
    expect(relativeError((await b.download(out)) as Float32Array, want, false)).toBeLessThanOrEqual(matmulFp8.tolerance.bf16!);
    [a, w, out, meta].forEach((t) => b.free(t));
  });

  it('runs cross_entropy_fused at GPT-2 vocabularies (1024 threads a row, vectors with a head and a tail) within tolerance', async () => {
    const b = await cuda();
    for (const vocab of [50304, 50257]) {
      for (const dtype of ['bf16', 'f32'] as const) {
        const c = { label: `6x${vocab}`, attrs: { rows: 6, vocab } };
        const r = await checkParity(b, crossEntropyFused as OpDef<CrossEntropyAttrs>, c, { seed: freshSeed(), dtype });
        expect(r.error, JSON.stringify(r)).toBeUndefined();
        expect(r.relErr, JSON.stringify(r)).toBeLessThanOrEqual(r.tol);
      }
    }
  });

  it('runs cross_entropy_backward in place with the out-of-place bits (bf16 and f32)', async () => {
    await expectCrossEntropyInPlace(await cuda(), 'bf16');
    await expectCrossEntropyInPlace(await cuda(), 'f32');
  });

  it("turns a kernel's OpError into an MdlmError with its code", async () => {
    const b = await cuda();
    const x = b.alloc([2, 3], 'f32');
    const out = b.alloc([2], 'f32');
    // The declaration's validation would stop this kind first; the kernel checks it too.
    const unchecked = { ...reduce, validate: undefined } as OpDef<ReduceAttrs>;
    await expectMdlmError(() => b.run(unchecked, { x, out }, { rows: 2, cols: 3, kind: 'median' as ReduceAttrs['kind'] }), 'UNSUPPORTED_OP', 'reduce', 'median');
    [x, out].forEach((t) => b.free(t));
  });

  it('reports out of memory with what was free, and f16 compute as unsupported', async () => {
    const b = await cuda();
    await expectMdlmError(() => b.alloc([2 ** 38], 'f32'), 'OUT_OF_MEMORY', 'free of');
    const h = b.alloc([1, 4], 'f16');
    const out = b.alloc([1, 4], 'f16');
    // An op that took f16 'float' args would still find no f16 kernel here.
    const swigluF16 = { ...swiglu, floatDtypes: ['f16'] } as typeof swiglu;
    await expectMdlmError(() => b.run(swigluF16, { gate: h, up: h, out }, { rows: 1, hidden: 4 }), 'UNSUPPORTED_DTYPE', 'f16');
    [h, out].forEach((t) => b.free(t));
  });

  it('trains 20 steps of each objective in bf16 with losses tracking the CPU in f32 (same weights, same batches)', async () => {
    const b = await cuda();
    const { root, dataDir, remove } = await tinyRunRoot('mdlm-cuda-train-');
    try {
      for (const kind of ['ar', 'mdlm']) {
        const over = { 'objective.kind': kind, 'train.steps': '20', 'train.warmupSteps': '5', 'train.evalBatches': '1' };
        const f32 = await runLosses(tinyConfig(root, dataDir, `${kind}-cpu`, { ...over, 'train.precision': 'f32' }), new CpuBackend());
        const bf16 = await runLosses(tinyConfig(root, dataDir, `${kind}-cuda`, { ...over, 'train.precision': 'bf16', backend: 'cuda' }), b);
        expectBf16Tracks(f32, bf16);
      }
    } finally {
      remove();
    }
  }, 300_000);

  // The CPU emulates FP8 around f32 activations, CUDA runs FP8 tensor cores around bf16 ones: the
  // quantised operands agree except where bf16 rounding moves a value across an FP8 rounding
  // boundary, so the runs part as bf16 and f32 do (expectBf16Tracks' 1e-2 a step), not more; a
  // wrong scale, a stale FP8 weight or a transposed operand read the wrong way moves the loss by
  // far more within a step or two.
  it('trains 20 steps in FP8, each recipe, with losses tracking the CPU emulating FP8 (same weights, same batches)', async () => {
    const b = await cuda();
    const { root, dataDir, remove } = await tinyRunRoot('mdlm-cuda-fp8-');
    try {
      for (const [kind, scaling] of [['ar', 'delayed'], ['mdlm', 'current'], ['ar', 'blockwise']] as const) {
        const over = { 'objective.kind': kind, 'train.steps': '20', 'train.warmupSteps': '5', 'train.evalBatches': '1', 'train.precision': 'fp8', 'train.fp8.scaling': scaling };
        const cpu = await runLosses(tinyConfig(root, dataDir, `${kind}-cpu-fp8`, over), new CpuBackend());
        const gpu = await runLosses(tinyConfig(root, dataDir, `${kind}-cuda-fp8`, { ...over, backend: 'cuda' }), b);
        expectBf16Tracks(cpu, gpu);
      }
    } finally {
      remove();
    }
  }, 300_000);
});
