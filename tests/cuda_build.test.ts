/**
 * Without a GPU: every name a CUDA launcher asks for is an argument or attribute of its op in the
 * registry (so a renamed one fails here, not in a run). Where nvcc is installed (CI): every .cu
 * under cuda/ that needs only the CUDA toolkit (not the ones including <cublasLt.h>) compiles for
 * sm_90a, so a kernel's syntax or type error fails the run, and their objects link into one
 * library, so a function defined (not inline) in a header that several of them include fails here
 * and not at the addon's link; a host build of cuda/convert.cuh and cuda/philox.cuh gives the
 * same bits as src/convert.ts and src/rng/philox.ts; the FP8 quantisation (per tensor and per
 * block) and scale update, run on the CPU by the warp emulator (tests/cuda_emu), give the same
 * bits as src/ops/fp8.ts and the ops' references; and the
 * attention, GEMM and cross-entropy kernels, run on that emulator, match a float64 reference, so an
 * indexing or fragment-layout error in them fails here before a GPU run. Without nvcc those tests
 * skip and say why.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CUDA_DIR, NVCC_FLAGS, cudaSources, findNvcc, gencodeFlags, locateToolkit, objectName, usesCublasLt } from '../cuda/build.mjs';
import { bf16ToF32, bitsF32, e4m3ToF32, e5m2ToF32, f16ToF32, f32Bits, f32ToBf16, f32ToE4m3, f32ToE5m2, f32ToF16, roundTo } from '../src/convert.js';
import { type Fp8Format, inversePow2, pow2Scale, quantizeValue } from '../src/ops/fp8.js';
import { type Fp8ScaleUpdateAttrs, fp8ScaleUpdate, fp8ScaleUpdateReference } from '../src/ops/fp8_scale_update.js';
import { OPS } from '../src/ops/index.js';
import { type QuantizeFp8Attrs, quantizeFp8, quantizeFp8Reference } from '../src/ops/quantize_fp8.js';
import { type QuantizeFp8BlockwiseAttrs, quantizeFp8Blockwise, quantizeFp8BlockwiseAttrs, quantizeFp8BlockwiseReference } from '../src/ops/quantize_fp8_blockwise.js';
import { PhiloxStream, RngPurpose, philox4x32 } from '../src/rng/philox.js';
import { type OpNames, checkLauncherNames, cppFiles, declaredAttributes } from './support/launcher_names.js';

const run = promisify(execFile);
const EMU_DIR = join(import.meta.dirname, 'cuda_emu');
const nvcc: string | null = findNvcc();
if (!nvcc) console.warn('[mdlm tests] skipping CUDA compile checks: nvcc not found (install the CUDA toolkit or set CUDA_HOME)');

const sources: string[] = cudaSources().filter((f: string) => !usesCublasLt(f));
const outDir = mkdtempSync(join(tmpdir(), 'mdlm-nvcc-'));
// A compile's outcome: the compiler's errors (null when it succeeded) and what it printed.
interface Compiled {
  readonly errors: string | null;
  readonly output: string;
}
const compiled = new Map<string, Promise<Compiled>>();
// Compiles run in a pool started before the tests that await them: one job per CPU but one, which
// is left to the other test files vitest runs beside this one.
const COMPILE_TIMEOUT = 300_000;

afterAll(() => rmSync(outDir, { recursive: true, force: true }));

async function compile(src: string): Promise<Compiled> {
  try {
    const { stdout, stderr } = await run(nvcc!, [...NVCC_FLAGS, ...gencodeFlags(['90a']), '-c', src, '-o', join(outDir, objectName(src))], { maxBuffer: 1 << 24 });
    return { errors: null, output: `${stderr}${stdout}` };
  } catch (e) {
    const err = e as { stdout?: string; stderr?: string; message: string };
    const output = `${err.stderr ?? ''}${err.stdout ?? ''}`;
    return { errors: output || err.message, output };
  }
}

describe('the CUDA launchers ask for the names their ops declare', () => {
  let registry: Map<string, OpNames>;
  beforeAll(() => {
    const attrs = declaredAttributes(join(import.meta.dirname, '..', 'src', 'ops', 'index.ts'));
    registry = new Map(OPS.map((op) => [op.name, { args: new Set(op.args.map((a) => a.name)), attrs: attrs.get(op.name) ?? new Set<string>() }]));
    expect(OPS.filter((op) => !attrs.has(op.name)).map((op) => op.name), 'ops declared without defineOp<Attrs>').toEqual([]);
  }, 60_000);

  it('finds every argument and attribute name of cuda/ in its op\'s declaration', () => {
    const files = cppFiles(CUDA_DIR);
    const names = files.flatMap((f) => [...f.text.matchAll(/"\w+"_(arg|attr)\b/g)]);
    expect(names.length).toBeGreaterThan(100);
    expect(checkLauncherNames(files.map((f) => ({ ...f, path: relative(CUDA_DIR, f.path) })), registry)).toEqual([]);
  });

  it('reports a misspelt name, a name of another op, and an op the registry lacks', () => {
    const text = `
      // "commented"_arg is not a name
      void helper(const OpCall& call) { call.i32("seqLen"_attr); call.arg("segIdz"_arg); }
      MDLM_OP(attention) {
        call.arg("q"_arg); call.i32("batch"_attr);
        call.arg("qq"_arg);          // misspelt
        call.flag("causl"_attr);     // misspelt
        call.arg("dout"_arg);        // attention_backward's, not attention's
        call.num("q"_attr);          // an argument asked for as an attribute
        run_op(call, "swiglu", {{"gate"_arg, a}, {"q"_arg, b}}, {{"rows"_attr, 1}, {"rowz"_attr, 2}});
      }
      MDLM_OP(attention_backward) { call.arg("dout"_arg); }
      MDLM_OP(no_such_op) {}`;
    const problems = checkLauncherNames([{ path: 'x.cu', text }], registry).join('\n');
    for (const bad of ['"segIdz"_arg', '"qq"_arg', '"causl"_attr', 'attention declares no argument \'dout\'', '"q"_attr', 'swiglu declares no argument \'q\'', '"rowz"_attr', "no op 'no_such_op'"]) {
      expect(problems).toContain(bad);
    }
    for (const good of ['"seqLen"', '"batch"', '"gate"', '"rows"_attr', 'commented', 'attention_backward declares']) expect(problems).not.toContain(good);
  });
});

describe.skipIf(nvcc)('cuda compile checks', () => {
  it.skip('skipped: nvcc not found', () => {});
});

describe.runIf(nvcc)('cuda kernels compile for sm_90a', () => {
  beforeAll(() => {
    let next = 0;
    const waiting = sources.map(() => {
      let resolve!: (v: Compiled) => void;
      const p = new Promise<Compiled>((r) => (resolve = r));
      return { p, resolve };
    });
    sources.forEach((s, i) => compiled.set(s, waiting[i]!.p));
    const worker = async (): Promise<void> => {
      while (next < sources.length) {
        const i = next++;
        waiting[i]!.resolve(await compile(sources[i]!));
      }
    };
    for (let j = 0; j < Math.min(Math.max(1, availableParallelism() - 1), sources.length); j++) void worker();
  });

  for (const src of sources) {
    const name = relative(CUDA_DIR, src);
    it(name, async () => {
      const { errors, output } = await compiled.get(src)!;
      expect(errors, `nvcc ${name}:\n${errors}`).toBeNull();
      // ptxas serialises every wgmma of a kernel when their accumulators cannot all stay in
      // registers (C7512) or one is defined on a path that meets an in-flight wgmma (C7515): the
      // kernel still runs, slower.
      expect(output, `nvcc ${name}:\n${output}`).not.toMatch(/wgmma\.mma_async instructions are serialized/);
    }, COMPILE_TIMEOUT);
  }

  // g++ -shared leaves the CUDA runtime's and cuBLASLt's symbols undefined, as the addon's link
  // resolves them, but refuses a symbol two objects define.
  it('links the objects into one library with no symbol defined twice', async () => {
    const objects: string[] = [];
    for (const src of sources) if ((await compiled.get(src)!).errors === null) objects.push(join(outDir, objectName(src)));
    expect(objects.length, 'no object compiled: the tests above say why').toBeGreaterThan(0);
    const linked = await run(process.env.CXX || 'g++', ['-shared', '-o', join(outDir, 'kernels.so'), ...objects]).then(() => null, (e: { stderr?: string; message: string }) => e.stderr || e.message);
    expect(linked, `g++ -shared over ${objects.length} objects:\n${linked}`).toBeNull();
  }, COMPILE_TIMEOUT);
});

describe.runIf(nvcc)('cuda host arithmetic matches the TypeScript definitions', () => {
  let checker = '';
  beforeAll(async () => {
    checker = join(outDir, 'cuda_host_check');
    await run(nvcc!, ['-std=c++17', '-I', CUDA_DIR, join(import.meta.dirname, 'support', 'cuda_host_check.cu'), '-o', checker]);
  }, COMPILE_TIMEOUT);

  async function host(mode: string, input = ''): Promise<string[]> {
    const child = run(checker, [mode], { maxBuffer: 1 << 28 });
    child.child.stdin!.end(input);
    return (await child).stdout.trim().split('\n');
  }

  const hex = (v: number): string => v.toString(16);

  it('encodes f32 into bf16, f16, E4M3 and E5M2 bit for bit as src/convert.ts', async () => {
    const rng = new PhiloxStream(5, RngPurpose.harness);
    const patterns: number[] = [];
    // Every sign/exponent/high-mantissa combination at the bits that decide each format's
    // rounding (ties, just above and below), and random patterns.
    for (let h = 0; h < 65536; h++) {
      for (const low of [0, 0x8000, 0x7fff, 0x8001, 0x1000, 0x0fff, 0x3000]) patterns.push(((h << 16) | low) >>> 0);
    }
    for (let i = 0; i < 100_000; i++) patterns.push(rng.nextU32());
    const got = await host('encode', patterns.map(hex).join('\n'));
    const bad: string[] = [];
    patterns.forEach((p, i) => {
      const x = bitsF32(p);
      const want = [f32ToBf16(x), f32ToF16(x), f32ToE4m3(x), f32ToE5m2(x)].map(hex).join(' ');
      if (got[i] !== want && bad.length < 5) bad.push(`0x${hex(p)}: got ${got[i]}, want ${want}`);
    });
    expect(bad).toEqual([]);
  });

  it('decodes every bf16, f16 and fp8 code as src/convert.ts', async () => {
    const got = await host('decode');
    // JavaScript numbers keep no NaN payloads: a NaN code must decode to some NaN.
    const same = (bits: string, want: number): boolean => (Number.isNaN(want) ? Number.isNaN(bitsF32(parseInt(bits, 16))) : bits === hex(f32Bits(want)));
    const bad: string[] = [];
    for (let c = 0; c < 65536 + 256; c++) {
      const [a, b] = got[c]!.split(' ') as [string, string];
      const want = c < 65536 ? [bf16ToF32(c), f16ToF32(c)] : [e4m3ToF32(c - 65536), e5m2ToF32(c - 65536)];
      if ((!same(a, want[0]!) || !same(b, want[1]!)) && bad.length < 5) bad.push(`code ${c}: got ${got[c]}, want ${want.join(' ')}`);
    }
    expect(bad).toEqual([]);
  });

  it('computes Philox4x32-10 blocks as src/rng/philox.ts', async () => {
    const rng = new PhiloxStream(6, RngPurpose.harness);
    const rows = Array.from({ length: 2000 }, () => Array.from({ length: 6 }, () => rng.nextU32()));
    const got = await host('philox', rows.map((r) => r.join(' ')).join('\n'));
    expect(got).toEqual(rows.map((r) => Array.from(philox4x32(r.slice(0, 4), r.slice(4))).join(' ')));
  });
});

// The kinds of shape attention_check's fuzz_cases draws, from a table row's label ("fuzz 3: B2
// T255 H4/2 D64 causal docs<=8 wide"): the kinds that `table` lacks.
function missingShapes(table: string): string[] {
  const seen = new Set<string>();
  for (const m of table.matchAll(/^fuzz \d+: B(\d+) T(\d+) H(\d+)\/(\d+) D(\d+) (causal|bidir)(.*?)\s+bf16/gm)) {
    const [B, T, H, G, D] = m.slice(1, 6).map(Number) as [number, number, number, number, number];
    const rest = m[7]!;
    if (B >= 2) seen.add('batch of 2 or more');
    if (T % 64 === 63) seen.add('a tile edge less one');
    if (T % 64 === 0) seen.add('a tile edge');
    if (T % 64 === 1 && T > 1) seen.add('a tile edge and one');
    if (T >= 250) seen.add('T ≥ 250');
    seen.add(D === 64 || D === 128 ? `D ${D}` : D < 64 ? 'D below 64' : 'D between 64 and 128');
    seen.add(H > G ? 'GQA' : 'one key head a query head');
    if (H >= 8) seen.add('8 or more heads');
    seen.add(m[6]!);
    seen.add(rest.includes('random ids') ? 'random ids' : rest.includes(' cut ') ? 'a cut' : rest.includes('docs<=8') ? 'up to 8 documents' : '1 + row % 3 documents');
    if (rest.includes('wide')) seen.add('wide scores');
  }
  const all = ['batch of 2 or more', 'a tile edge less one', 'a tile edge', 'a tile edge and one', 'T ≥ 250', 'D 64', 'D 128', 'D below 64', 'D between 64 and 128', 'GQA',
    'one key head a query head', '8 or more heads', 'causal', 'bidir', 'random ids', 'a cut', 'up to 8 documents', '1 + row % 3 documents', 'wide scores'];
  return all.filter((k) => !seen.has(k));
}

// Concurrent: each test runs single-threaded emulator processes one after another; run in turn
// they would make this file the suite's critical path. vitest.config.ts's maxConcurrency keeps
// them to one a core.
describe.runIf(nvcc)('the kernels under the CPU warp emulator (tests/cuda_emu)', { concurrent: true }, () => {
  // Limits several times each test's time on a 2-core machine running the rest of the suite.
  const EMU_TIMEOUT = 300_000;
  const ATTENTION_TIMEOUT = 600_000;
  let toolkit: ReturnType<typeof locateToolkit>;
  const env = (extra: Record<string, string> = {}): NodeJS.ProcessEnv => ({ ...process.env, LD_LIBRARY_PATH: toolkit.cudaLib, ...extra });
  // g++ with the emulator in place of the GPU; cudart only for op.cc's error names.
  const buildEmu = async (src: string, out: string, lang: string[] = []): Promise<string> => {
    const exe = join(outDir, out);
    await run(process.env.CXX || 'g++', ['-std=c++17', '-O2', '-fno-strict-aliasing', ...lang, '-DWARP_EMULATOR', '-I', toolkit.cudaInclude, '-I', EMU_DIR,
      join(EMU_DIR, src), '-L', toolkit.cudaLib, '-lcudart', '-o', exe], { maxBuffer: 1 << 24 });
    return exe;
  };
  let attentionCheck: Promise<string>;
  beforeAll(() => {
    toolkit = locateToolkit();
    attentionCheck = buildEmu('attention_check.cc', 'attention_check');
    attentionCheck.catch(() => {}); // awaited (and reported) by the tests that run it
  });

  it('models every wgmma form the kernels use (swizzled tiles, descriptors, fragments, stmatrix, TMA tile loads, multicast in a cluster with remote arrivals) as wgmma_check.cu checks them on the GPU', async () => {
    const exe = await buildEmu('wgmma_check.cu', 'wgmma_check_emu', ['-x', 'c++']);
    // TMA loads land at the mbarrier wait by default, at issue when eager: both must match
    for (const mode of ['', 'eager']) {
      const { stdout } = await run(exe, [], { env: env({ EMU_CP_ASYNC: mode }) });
      const lines = stdout.trim().split('\n');
      expect(lines.map((l) => l.split(' ')[0]), stdout).toEqual(['kk', 'rs', 'mm', 'st', 'tma', 'mc']);
      for (const l of lines) expect(l, stdout).toMatch(/ rel err [0-9.e+-]+ {2}ok$/);
    }
  }, EMU_TIMEOUT);

  it('reports a deadlock by what each run of blocked threads waits on (an mbarrier an arrival short, a named barrier a warp short)', async () => {
    const exe = await buildEmu('deadlock_check.cc', 'deadlock_check');
    const failure = await run(exe, [], { env: env() }).then(
      () => null,
      (e: { stderr?: string }) => e,
    );
    expect(failure, 'the emulator should abort at the deadlock').not.toBeNull();
    const stderr = String(failure?.stderr);
    expect(stderr).toContain('emu: deadlock in block (0,0,0)');
    expect(stderr).toContain('block 0, threads 0-31: mbarrier at 0, phase 0: 1 of 33 arrivals and 0 bytes to come');
    expect(stderr).toContain('block 0, threads 32-63: named barrier 1: 32 in');
    expect(stderr).not.toContain('threads 64');  // the third warp exited
  }, EMU_TIMEOUT);

  // Runs attention_check on the cases whose name contains `filter` (or any of its '|'-separated
  // parts; '' for all) and expects `rows` table rows; it exits non-zero (run rejects) when a case
  // is over tolerance, with its table in the message. Returns the table.
  const expectCasesPass = async (filter: string, extra: Record<string, string>, rows: number): Promise<string> => {
    const { stdout } = await run(await attentionCheck, filter ? [filter] : [], { env: env(extra), maxBuffer: 1 << 24 });
    expect(stdout, JSON.stringify(extra)).not.toMatch(/FAIL/);
    expect(stdout.trim().split('\n').length, JSON.stringify(extra)).toBe(1 + rows);
    return stdout;
  };

  it('computes forward and both backwards within the registry tolerances, f32 and bf16, every case', async () => {
    await expectCasesPass('', {}, 2 * 24);
  }, ATTENTION_TIMEOUT);

  it('runs the mma.sync kernels that GPUs before Hopper run (the kernel settings\' hopper_kernels off) within tolerance, rope turns too', async () => {
    await expectCasesPass('128', { HOPPER_KERNELS: '0', DTYPE: 'bf16' }, 7);
    await expectCasesPass('D=64', { HOPPER_KERNELS: '0', DTYPE: 'bf16' }, 6);
    await expectCasesPass('D=64', { ROPE: '10000', HOPPER_KERNELS: '0', DTYPE: 'bf16' }, 6);
  }, EMU_TIMEOUT);

  it('writes the gradients with their tokens further apart (gradStride), their gaps left alone, and turns dq and dk back through rope (ropeBase)', async () => {
    // 16-byte rows through the tensor-core kernels, then rows the SIMT kernels take (bf16) and
    // f32 over a multi-tile causal case with documents, a GQA case and unsorted ids; the turn in
    // registers (bwd_ws's dK at head dim 64 and 128, bwd_dq_store's dQ) and in a pass of its own
    // (the other head dims, the mma.sync and deterministic kernels).
    await expectCasesPass('multi', { GRAD_STRIDE_EXTRA: '72', ROPE: '10000', DTYPE: 'bf16' }, 11);
    await expectCasesPass('multi D=64 causal|gqa 4/1 bidirectional T=21|random ids D=64', { GRAD_STRIDE_EXTRA: '4', ROPE: '500' }, 2 * 3);
  }, EMU_TIMEOUT);

  // The cases the warp-specialised kernels run (fwd_ws, bwd_ws: head dims padded to 64 and 128)
  // but the two largest, multi-tile GQA at batch 3, whose kernels and tile loops the multi-tile GQA
  // cases at head dims 56 and 120 run too.
  const WS_CASES = 'D=64|D=128|pad 64|pad 128|-gqa 4/2 T=300|-gqa 4/1 T=260';
  const WS_ROWS = 12;

  it('has no shared-memory race when one warpgroup runs ahead and copies land early (bf16, every case; the warp-specialised kernels\' twice more)', async () => {
    // Skewed scheduling lets the last warps run as far ahead as the barriers allow; eager copies
    // land at issue. A tile rewritten while an in-flight wgmma (or another warp) still reads it
    // then fails the run ("changed before the wait") or the tolerance.
    await expectCasesPass('', { EMU_SCHEDULE: 'skewed', EMU_CP_ASYNC: 'eager', DTYPE: 'bf16' }, 24);
    // The warp-specialised kernels (mbarriers, named barriers, a producer warpgroup: the forward at
    // head dim 64 and 128, two blocks an SM at 64) once more round-robin with eager copies, and skewed
    // with copies that land as late as their waits allow.
    await expectCasesPass(WS_CASES, { EMU_CP_ASYNC: 'eager', DTYPE: 'bf16' }, WS_ROWS);
    await expectCasesPass(WS_CASES, { EMU_SCHEDULE: 'skewed', DTYPE: 'bf16' }, WS_ROWS);
  }, EMU_TIMEOUT);

  it('computes random shapes within tolerance too: tile edges, documents of any length, GQA, wide scores (bf16, fixed seeds)', async () => {
    // 16 cases of fuzz_cases (attention_check.cc) a seed: round-robin, then with eager copies, then
    // with the gradients strided and turned through rope, then on the mma.sync kernels that Ampere
    // and Ada run. The seeds are ones whose first 16 cases cover every kind of shape the generator
    // makes (missingShapes checks it) without its largest draws, which take the emulator longest.
    const runs: [string, Record<string, string>][] = [
      ['208', {}],
      ['270', { EMU_CP_ASYNC: 'eager' }],
      ['136', { GRAD_STRIDE_EXTRA: '8', ROPE: '10000' }],
      ['353', { HOPPER_KERNELS: '0' }],
    ];
    for (const [seed, extra] of runs) {
      const table = await expectCasesPass('', { FUZZ: '16', FUZZ_SEED: seed, DTYPE: 'bf16', ...extra }, 16);
      expect(missingShapes(table), `FUZZ_SEED=${seed}:\n${table}`).toEqual([]);
    }
  }, EMU_TIMEOUT);

  it('runs the Hopper GEMM (cuda/gemm/gemm_ws.cuh) in every form the ops launch (rope ping-pong 128 and cooperative 256 wide, SwiGLU forward in both forms, SwiGLU backward; TMA stores or not) within bf16 rounding of float64, under every kind of schedule', async () => {
    const exe = await buildEmu('matmul_check.cc', 'matmul_check');
    // Random seed 11 holds a producer thread back: without the ping-pong turns' barriers it shows
    // consumers waiting on a stage whose other-warpgroup phase is still open.
    // Seed 3 with eager copies issues a TMA store before the other threads' stmatrix if no barrier
    // stands between them; round-robin lands stores at their wait, where a tile reused too early shows.
    const schedules: Record<string, string>[] = [
      {}, { EMU_SCHEDULE: 'skewed', EMU_CP_ASYNC: 'eager' }, { EMU_SCHEDULE: 'random:11' }, { EMU_SCHEDULE: 'random:8' }, { EMU_SCHEDULE: 'random:3', EMU_CP_ASYNC: 'eager' },
    ];
    for (const extra of schedules) {
      const { stdout } = await run(exe, [], { env: env(extra), maxBuffer: 1 << 24 });
      const lines = stdout.trim().split('\n');
      expect(lines.length, stdout).toBe(27);
      for (const l of lines) expect(l, `${JSON.stringify(extra)}\n${stdout}`).toMatch(/ rel err [0-9.e+-]+ {2}ok$/);
    }
  }, EMU_TIMEOUT);

  it('runs cross_entropy_fused (a block a row) within tolerance of float64, in place too, under every kind of schedule', async () => {
    const exe = await buildEmu('cross_entropy_check.cc', 'cross_entropy_check');
    // Either barrier of the block reduction (block_online) dropped shows under the default and
    // random schedules; the first one not under the skewed one.
    const schedules: Record<string, string>[] = [{}, { EMU_SCHEDULE: 'skewed' }, { EMU_SCHEDULE: 'random:11' }];
    for (const extra of schedules) {
      const { stdout } = await run(exe, [], { env: env(extra), maxBuffer: 1 << 24 });
      const lines = stdout.trim().split('\n');
      expect(lines.length, stdout).toBe(5);
      for (const l of lines) expect(l, `${JSON.stringify(extra)}\n${stdout}`).toMatch(/ rel err [0-9.e+-]+ \([a-z]+\) {2}ok$/);
    }
  }, EMU_TIMEOUT);

  it('quantises to FP8 and updates scales bit for bit as src/ops/fp8.ts: the scale and rounding over many values, quantize_fp8 on every test case in both dtypes, aligned and not, with NaN and infinities, and fp8_scale_update', async () => {
    const exe = await buildEmu('fp8_check.cc', 'fp8_check');
    const hostRun = async (args: string[], input: string, extra: Record<string, string> = {}): Promise<string[]> => {
      const child = run(exe, args, { env: env(extra), maxBuffer: 1 << 26 });
      child.child.stdin!.end(input);
      return (await child).stdout.trim().split('\n');
    };
    const hex = (v: number): string => v.toString(16);
    const fbits = (v: number): string => hex(f32Bits(v));
    const code = (format: Fp8Format, v: number): number => (format === 'e4m3' ? f32ToE4m3(v) : f32ToE5m2(v));
    const rng = new PhiloxStream(56, RngPurpose.harness);
    const pow2 = (k: number): number => bitsF32((k + 127) << 23);

    // Rounding: every sign/exponent/high-mantissa pattern (ties, just above and below) and random
    // ones, against power-of-two scales over the whole range (products overflow, land on
    // subnormals, saturate).
    const pairs: [number, number][] = [];
    for (let h = 0; h < 4096; h++) {
      for (const low of [0, 0x80000, 0x7ffff, 0x80001, 0x40000, 0xfffff]) pairs.push([((h << 20) | low) >>> 0, pow2(rng.int(61) - 30)]);
    }
    for (let i = 0; i < 50_000; i++) pairs.push([rng.nextU32(), pow2(rng.int(253) - 126)]);
    const values = await hostRun(['values'], pairs.map(([x, s]) => `${hex(x)} ${hex(f32Bits(s))}`).join('\n'));
    const bad: string[] = [];
    pairs.forEach(([x, s], i) => {
      const want = (['e4m3', 'e5m2'] as const).map((f) => hex(code(f, quantizeValue(bitsF32(x), s, f)))).join(' ');
      if (values[i] !== want && bad.length < 5) bad.push(`x 0x${hex(x)} scale ${s}: got ${values[i]}, want ${want}`);
    });

    // Scales: amaxes of every kind (zero, negative, subnormal, infinite, NaN, the 1.75 boundary), margins 0-3.
    const amaxes = [0, 0x80000000, 1, 0x7fffff, 0x800000, 0x7f800000, 0xff800000, 0x7fc00000, 0x43e00000, 0x43e00001, 0x3fe00000, 0x3fe00001, 0x7f7fffff];
    for (let i = 0; i < 20_000; i++) amaxes.push(i % 2 ? rng.nextU32() & 0x7fffffff : ((rng.int(255) << 23) | (rng.nextU32() & 0x7fffff)) >>> 0);
    const scaleRows = amaxes.map((a, i) => [a, f32Bits(pow2(rng.int(41) - 20)), i % 4] as const);
    const scales = await hostRun(['scale'], scaleRows.map(([a, p, m]) => `${hex(a)} ${hex(p)} ${m}`).join('\n'));
    scaleRows.forEach(([a, p, m], i) => {
      const want = (['e4m3', 'e5m2'] as const).flatMap((f) => {
        const s = pow2Scale(bitsF32(a), f, m, bitsF32(p));
        return [fbits(s), fbits(inversePow2(s))];
      }).join(' ');
      if (scales[i] !== want && bad.length < 10) bad.push(`amax 0x${hex(a)} previous 0x${hex(p)} margin ${m}: got ${scales[i]}, want ${want}`);
    });
    expect(bad).toEqual([]);

    // quantize_fp8: each test case's sample and one in both layouts of more tiles than the
    // emulated GPU's blocks (fp8_check's grids are 8 blocks), as stored in f32 and in bf16, at the
    // buffers' start and one element in (element-wise loads and stores); the tiled ones (cols,
    // both) again with the last warps run ahead (a tile rewritten before every warp has stored it
    // shows); then one in both layouts with NaN, infinities and a NaN history[0].
    type QuantizeRun = { label: string; attrs: QuantizeFp8Attrs; x: Float64Array; meta: Float64Array; dtype: 'f32' | 'bf16'; offset: number; schedule?: string };
    const quantizeRuns: QuantizeRun[] = [];
    const caseNamed = (label: string): QuantizeFp8Attrs => quantizeFp8.cases('test').find((c) => c.label === label)!.attrs;
    const quantizeCases = [...quantizeFp8.cases('test'), { label: 'e5m2 delayed 300x200 both', attrs: { ...caseNamed('e5m2 delayed 130x64 history 16 cols'), rows: 300, cols: 200, layout: 'both' as const } }];
    for (const c of quantizeCases) {
      const { x, meta } = quantizeFp8.sample(new PhiloxStream(7, RngPurpose.harness), c.attrs) as { x: Float64Array; meta: Float64Array };
      for (const dtype of ['f32', 'bf16'] as const) {
        for (const offset of [0, 1]) quantizeRuns.push({ label: `${c.label} ${dtype} offset ${offset}`, attrs: c.attrs, x: x.map((v) => roundTo(dtype, v)), meta, dtype, offset });
      }
      if (c.attrs.layout !== 'rows') quantizeRuns.push({ label: `${c.label} bf16 skewed`, attrs: c.attrs, x: x.map((v) => roundTo('bf16', v)), meta, dtype: 'bf16', offset: 0, schedule: 'skewed' });
    }
    const special = caseNamed('e4m3 current margin 1 37x45 both');
    for (const scaling of ['current', 'delayed'] as const) {
      const attrs = { ...special, scaling };
      const { x, meta } = quantizeFp8.sample(new PhiloxStream(8, RngPurpose.harness), attrs) as { x: Float64Array; meta: Float64Array };
      x[3] = NaN, x[100] = Infinity, x[101] = -Infinity, x[200] = -0, meta[0] = NaN;
      quantizeRuns.push({ label: `NaN and infinities ${scaling}`, attrs, x, meta, dtype: 'f32', offset: 0 });
    }
    for (const { label, attrs, x, meta, dtype, offset, schedule } of quantizeRuns) {
      const { rows, cols, format, scaling, layout, historyLen, margin } = attrs;
      const args = ['quantize', rows, cols, format, scaling, layout, historyLen, margin, dtype, offset].map(String);
      const got = await hostRun(args, [...meta, ...x].map(fbits).join('\n'), schedule ? { EMU_SCHEDULE: schedule } : {});
      const wantMeta = Float32Array.from(meta);
      const out = new Float64Array(layout === 'cols' ? 0 : x.length), outT = new Float64Array(layout === 'rows' ? 0 : x.length);
      quantizeFp8Reference(x, wantMeta, out, outT, attrs);
      const want = [...Array.from(wantMeta, fbits), ...Array.from([...out, ...outT], (v) => hex(code(format, v)))];
      const first = want.findIndex((w, i) => got[i] !== w);
      expect(got.length, label).toBe(want.length);
      expect(first, `${label}: at ${first} (meta has ${wantMeta.length}) got ${got[first]}, want ${want[first]}`).toBe(-1);
    }

    // fp8_scale_update: the test cases, and a history with an infinity, a NaN and negatives.
    const updates: { label: string; attrs: Fp8ScaleUpdateAttrs; meta: Float64Array }[] = fp8ScaleUpdate.cases('test').map((c) => ({
      label: c.label, attrs: c.attrs, meta: fp8ScaleUpdate.sample(new PhiloxStream(9, RngPurpose.harness), c.attrs).meta as Float64Array,
    }));
    const odd: Fp8ScaleUpdateAttrs = { sites: 4, historyLen: 70, format: 'e4m3', margin: 0 };
    const oddMeta = fp8ScaleUpdate.sample(new PhiloxStream(10, RngPurpose.harness), odd).meta as Float64Array;
    oddMeta[5] = Infinity, oddMeta[72 + 7] = NaN, oddMeta[144 + 2] = -1e30, oddMeta[216 + 69] = 1e38;
    updates.push({ label: 'infinity, NaN, negative', attrs: odd, meta: oddMeta });
    for (const { label, attrs, meta } of updates) {
      const got = await hostRun(['scale_update', attrs.sites, attrs.historyLen, attrs.format, attrs.margin].map(String), Array.from(meta, fbits).join('\n'));
      const want = Float32Array.from(meta);
      fp8ScaleUpdateReference(want, attrs);
      expect(got, label).toEqual(Array.from(want, fbits));
    }
  }, EMU_TIMEOUT);

  it('quantises blockwise bit for bit as quantize_fp8_blockwise\'s reference: every test case in both dtypes, aligned and not, the transposed ones with the last warps run ahead, and blocks with NaN and infinities', async () => {
    const exe = await buildEmu('fp8_blockwise_check.cc', 'fp8_blockwise_check');
    const hex = (v: number): string => v.toString(16);
    type BlockwiseRun = { label: string; attrs: QuantizeFp8BlockwiseAttrs; x: Float64Array; dtype: 'f32' | 'bf16'; offset: number; schedule?: string };
    const runs: BlockwiseRun[] = [];
    for (const c of quantizeFp8Blockwise.cases('test')) {
      const { x } = quantizeFp8Blockwise.sample(new PhiloxStream(11, RngPurpose.harness), c.attrs) as { x: Float64Array };
      for (const dtype of ['f32', 'bf16'] as const) {
        for (const offset of [0, 1]) runs.push({ label: `${c.label} ${dtype} offset ${offset}`, attrs: c.attrs, x: x.map((v) => roundTo(dtype, v)), dtype, offset });
      }
      if (c.attrs.transpose) runs.push({ label: `${c.label} bf16 skewed`, attrs: c.attrs, x: x.map((v) => roundTo('bf16', v)), dtype: 'bf16', offset: 0, schedule: 'skewed' });
    }
    for (const block of ['1x128', '128x128'] as const) {
      const attrs = quantizeFp8BlockwiseAttrs(200, 300, 'e4m3', block);
      const { x } = quantizeFp8Blockwise.sample(new PhiloxStream(12, RngPurpose.harness), attrs) as { x: Float64Array };
      x[140 * 300 + 3] = NaN, x[150 * 300 + 200] = Infinity, x[199 * 300 + 299] = -Infinity, x[160 * 300 + 10] = -0;
      runs.push({ label: `NaN and infinities ${block}`, attrs, x, dtype: 'f32', offset: 0 });
    }
    for (const { label, attrs, x, dtype, offset, schedule } of runs) {
      const { rows, cols, format, block, transpose, margin } = attrs;
      const args = [rows, cols, format, block, transpose ? 1 : 0, margin, dtype, offset].map(String);
      const child = run(exe, args, { env: env(schedule ? { EMU_SCHEDULE: schedule } : {}), maxBuffer: 1 << 26 });
      child.child.stdin!.end(Array.from(x, (v) => hex(f32Bits(v))).join('\n'));
      const got = (await child).stdout.trim().split('\n');
      const scaleInv = new Float64Array(quantizeFp8Blockwise.shapes(attrs).scaleInv!.reduce((p, d) => p * d, 1)), out = new Float64Array(x.length);
      quantizeFp8BlockwiseReference(x, out, scaleInv, attrs);
      const want = [...Array.from(scaleInv, (v) => hex(f32Bits(v))), ...Array.from(out, (v) => hex(format === 'e4m3' ? f32ToE4m3(v) : f32ToE5m2(v)))];
      const first = want.findIndex((w, i) => got[i] !== w);
      expect(got.length, label).toBe(want.length);
      expect(first, `${label}: at ${first} (scaleInv has ${scaleInv.length}) got ${got[first]}, want ${want[first]}`).toBe(-1);
    }
  }, EMU_TIMEOUT);

  it('has no race that one slow thread exposes: the TMA issuer, a consumer warpgroup\'s first lane (bf16, the warp-specialised kernels\' cases)', async () => {
    // A random priority order with one thread held, at random points, until every other thread
    // is blocked (warp_emu.h, EMU_SCHEDULE=random). Seed 8 holds lane 0 of warp 8, the producer
    // warpgroup's TMA issuer in the warp-specialised kernels: it exposes a forward whose consumers
    // could complete two phases of empty_v before the producer's wait (a hang), which no skewed or
    // round-robin schedule does. Seed 0 holds lane 0 of warp 0 (the first consumer
    // warpgroup's), seed 21 a random lane of warp 9 (a producer thread that stores segment ids
    // and arrives). The other kernels have no single-thread roles: skewed schedules cover them.
    await expectCasesPass(WS_CASES, { EMU_SCHEDULE: 'random:8', DTYPE: 'bf16' }, WS_ROWS);
    await expectCasesPass(WS_CASES, { EMU_SCHEDULE: 'random:0', EMU_CP_ASYNC: 'eager', DTYPE: 'bf16' }, WS_ROWS);
    await expectCasesPass(WS_CASES, { EMU_SCHEDULE: 'random:21', DTYPE: 'bf16' }, WS_ROWS);
  }, EMU_TIMEOUT);
});
