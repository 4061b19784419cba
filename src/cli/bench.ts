/** `mdlm bench kernels`: the parity harness as a benchmark over the op registry. */
import { Command } from 'commander';
import type { Backend } from '../backend/backend.js';
import { fail } from '../errors.js';
import { type ParityRecord, checkGradient, checkParity, freshSeed, parityDtypes } from '../harness/parity.js';
import { OPS } from '../ops/index.js';
import type { OpDef } from '../ops/op.js';
import { benchMatmul, formatMatmulTable, matmulBenchShapes } from '../bench/matmul.js';
import { PEER_MODES, type PeerMode, benchTrain, describeThroughput, formatProfile } from '../bench/train.js';
import { PRESET_NAMES } from '../config/presets.js';
import { FP8_SCALING_RECIPES, LOSS_ROWS, OBJECTIVES, PRECISIONS, RECOMPUTE, type Recompute } from '../config/schema.js';
import { choiceOption, intOption, numberOption } from './options.js';
import { type BackendChoice, createBackend, parseBackendChoice } from '../runtime/backends.js';
import { parallelNormals } from '../runtime/parallel_normals.js';
import { setNormalsFiller } from '../rng/normals.js';
import { type DType, parseDType } from '../tensor.js';

export interface BenchKernelsOptions {
  readonly backends: readonly string[];
  readonly ops?: readonly string[];
  /** Only the cases whose label contains this text (e.g. to profile one shape). */
  readonly caseFilter?: string;
  readonly scale: 'test' | 'bench';
  readonly reps: number;
  readonly seed: number;
  readonly gradients: boolean;
  readonly check: boolean;
  /** Float dtypes to check ops in (default: each backend's preferred: bf16 on CUDA, else f32). */
  readonly dtypes?: readonly DType[];
  readonly onRecord?: (r: ParityRecord) => void;
}

function selectOps(names: readonly string[] | undefined): OpDef<unknown>[] {
  if (!names || names.length === 0) return [...OPS];
  return names.map((n) => OPS.find((o) => o.name === n) ?? fail('BAD_ARGUMENT', `unknown op '${n}'; ops: ${OPS.map((o) => o.name).join(', ')}`));
}

export async function benchKernels(opts: BenchKernelsOptions): Promise<ParityRecord[]> {
  // Bench-size inputs draw hundreds of millions of normals: fill them over worker threads.
  setNormalsFiller(parallelNormals());
  const ops = selectOps(opts.ops);
  const filter = opts.caseFilter;
  // Each case keeps its seed (seed + its index among the op's cases) whatever the filter.
  const work = ops.map((op) => {
    const all = op.cases(opts.scale);
    const cases = all.map((c, i) => ({ c, seed: opts.seed + i })).filter(({ c }) => filter === undefined || c.label.includes(filter));
    return { op, all, cases };
  });
  if (filter !== undefined && work.every((w) => w.cases.length === 0)) {
    const labels = work.flatMap((w) => w.all.map((c) => `${w.op.name}: ${c.label}`));
    fail('BAD_ARGUMENT', `no ${opts.scale} case contains '${filter}'; cases: ${labels.join('; ')}`);
  }
  const records: ParityRecord[] = [];
  const emit = (r: ParityRecord): void => {
    records.push(r);
    opts.onRecord?.(r);
  };
  const backends: Backend[] = [];
  for (const name of opts.backends) {
    const choice = parseBackendChoice(name);
    backends.push(await createBackend(choice));
  }
  try {
    for (const { op, cases } of work) {
      for (const { c, seed } of cases) {
        for (const b of backends) {
          const dtypes = parityDtypes(op, b, opts.dtypes);
          if (!b.supports(op.name)) {
            emit({ op: op.name, case: c.label, backend: b.name, check: 'reference', shape: '', dtype: dtypes[0] ?? 'f32', relErr: Infinity, worst: '', tol: 0, pass: false, seed, error: `no ${b.name} kernel` });
            continue;
          }
          for (const dtype of dtypes) emit(await checkParity(b, op, c, { seed, dtype, timeReps: opts.reps, skipReference: !opts.check }));
        }
        if (opts.gradients && op.gradient && opts.scale === 'test') emit(checkGradient(op, c, seed));
      }
    }
  } finally {
    for (const b of backends) b.destroy();
  }
  return records;
}

function fmt(x: number | undefined, digits = 3): string {
  if (x === undefined) return '-';
  if (!Number.isFinite(x)) return String(x);
  return x === 0 ? '0' : x < 1e-3 || x >= 1e5 ? x.toExponential(2) : x.toFixed(digits);
}

export function formatRecordRow(r: ParityRecord): string {
  return [
    r.op.padEnd(22), r.case.slice(0, 26).padEnd(26), r.backend.padEnd(8), r.dtype.padEnd(5), fmt(r.relErr).padStart(9), fmt(r.tol).padStart(9),
    (r.pass ? 'pass' : 'FAIL').padEnd(5), fmt(r.ms).padStart(9), fmt(r.tflops).padStart(8), ` ${r.shape}${r.error ? `  error: ${r.error}` : ''}`,
  ].join(' ');
}

export const RECORD_HEADER = [
  'op'.padEnd(22), 'case'.padEnd(26), 'backend'.padEnd(8), 'dtype'.padEnd(5), 'rel.err'.padStart(9), 'tol'.padStart(9), 'pass'.padEnd(5), 'ms'.padStart(9), 'TFLOP/s'.padStart(8), ' shape',
].join(' ');

export function benchCommand(): Command {
  const bench = new Command('bench').description('Benchmarks');
  bench
    .command('kernels')
    .description('Check every op against the CPU reference on each backend and time it')
    .option('--backend <list>', 'comma-separated backends', 'cpu,webgpu')
    .option('--ops <list>', 'comma-separated op names (default: all)')
    .option('--case <text>', "only the cases whose label contains this text, e.g. 'T2048 H16 D128 causal'")
    .option('--dtype <list>', "float dtypes to check ops in, e.g. f32,bf16 (default: each backend's own: bf16 on cuda, f32 elsewhere)")
    .option('--scale <scale>', "'test' (small shapes, fast) or 'bench' (training-size shapes)", 'test')
    .option('--reps <n>', 'timed calls per case', '5')
    .option('--seed <n>', 'input seed (default: fresh each run)')
    .option('--no-gradients', 'skip finite-difference checks of backward ops')
    .option('--no-check', 'time only, without the float64 reference (records say check: unchecked)')
    .option('--json', 'print a JSON array of records')
    .action(async (o: { backend: string; ops?: string; case?: string; dtype?: string; scale: string; reps: string; seed?: string; gradients: boolean; check: boolean; json?: boolean }) => {
      if (o.scale !== 'test' && o.scale !== 'bench') fail('BAD_ARGUMENT', `--scale must be 'test' or 'bench', got '${o.scale}'`);
      const reps = Number(o.reps);
      if (!Number.isInteger(reps) || reps < 0) fail('BAD_ARGUMENT', `--reps must be a non-negative integer, got '${o.reps}'`);
      const seed = o.seed === undefined ? freshSeed() : Number(o.seed);
      if (!Number.isSafeInteger(seed) || seed < 0) fail('BAD_ARGUMENT', `--seed must be a non-negative integer, got '${o.seed}'`);
      if (!o.json) console.log(RECORD_HEADER);
      const records = await benchKernels({
        backends: o.backend.split(',').map((s) => s.trim()).filter(Boolean),
        ...(o.ops ? { ops: o.ops.split(',').map((s) => s.trim()).filter(Boolean) } : {}),
        ...(o.case !== undefined ? { caseFilter: o.case } : {}),
        ...(o.dtype ? { dtypes: o.dtype.split(',').map((s) => parseDType(s.trim())) } : {}),
        scale: o.scale,
        reps,
        seed,
        gradients: o.gradients,
        check: o.check,
        ...(o.json ? {} : { onRecord: (r: ParityRecord) => console.log(formatRecordRow(r)) }),
      });
      if (o.json) console.log(JSON.stringify(records, null, 2));
      const failed = records.filter((r) => !r.pass);
      if (!o.json) console.log(`\n${records.length - failed.length} passed, ${failed.length} failed (seed ${seed})`);
      if (failed.length > 0) process.exitCode = 1;
    });
  bench
    .command('matmul')
    .description("WebGPU matmul TFLOP/s against TensorFlow.js's WebGPU backend on the same adapter")
    .option('--sizes <list>', 'square sizes, e.g. 1024,2048,4096 (default: the op\'s bench cases)')
    .option('--reps <n>', 'timed calls per shape', '10')
    .option('--mdlm-only', 'skip the TensorFlow.js peer')
    .option('--json', 'print JSON records')
    .action(async (o: { sizes?: string; reps: string; mdlmOnly?: boolean; json?: boolean }) => {
      const sizes = o.sizes?.split(',').map((x) => {
        const n = Number(x);
        if (!Number.isInteger(n) || n <= 0) fail('BAD_ARGUMENT', `--sizes: '${x}' is not a positive integer`);
        return n;
      });
      const records = await benchMatmul({
        shapes: matmulBenchShapes(sizes),
        reps: Number(o.reps),
        mdlmOnly: o.mdlmOnly ?? false,
        onRecord: (r) => {
          if (!o.json) console.error(`${r.shape}: mdlm ${r.mdlmTflops.toFixed(3)} TFLOP/s${r.tfjsTflops === undefined ? '' : `, tfjs ${r.tfjsTflops.toFixed(3)}`}`);
        },
      });
      if (records[0]) console.log(o.json ? JSON.stringify(records, null, 2) : `${records[0].adapter}\n${formatMatmulTable(records)}`);
    });
  bench
    .command('train')
    .description('Training tokens/s, ms/step, MFU and peak memory of a preset on a backend, beside the same model in PyTorch (eager, torch.compile)')
    .option('--preset <name>', `model preset: ${PRESET_NAMES.join(', ')}`, 'llama-124m')
    .option('--objective <kind>', 'ar or mdlm', choiceOption('--objective', OBJECTIVES), 'mdlm')
    .option('--backend <name>', 'auto, cpu, webgpu or cuda', 'auto')
    .option('--batch <n>', "sequences per step (default: the preset's micro-batch)", intOption('--batch', 1))
    .option('--seq-len <n>', "tokens per sequence (default: the preset's)", intOption('--seq-len', 2))
    .option('--steps <n>', 'timed optimizer steps', intOption('--steps', 1), 10)
    .option('--warmup <n>', 'untimed steps first (allocation, autotuning, compilation)', intOption('--warmup', 0), 3)
    .option('--precision <p>', 'auto (bf16 on cuda), f32, bf16, fp16 (cpu: f16 compute) or fp8 (FP8 GEMMs in the blocks, train.fp8 defaults; also runs the bf16 configuration for comparison)', choiceOption('--precision', PRECISIONS), 'auto')
    .option('--fp8-scaling <recipe>', `with --precision fp8, train.fp8.scaling: ${FP8_SCALING_RECIPES.join(' or ')}`, choiceOption('--fp8-scaling', FP8_SCALING_RECIPES), 'delayed')
    .option('--recompute <what>', `train.recompute: ${RECOMPUTE.join(' or ')}`, choiceOption('--recompute', RECOMPUTE), 'none')
    .option('--loss-rows <which>', `train.lossRows: ${LOSS_ROWS.join(' or ')} (default: the preset's)`, choiceOption('--loss-rows', LOSS_ROWS))
    .option('--logit-chunks <n>', "train.logitChunks: the LM head and loss over this many blocks of tokens, holding one block of logits (default: the preset's)", intOption('--logit-chunks', 1))
    .option('--peer <list>', `PyTorch peer modes, comma-separated: ${PEER_MODES.join(', ')}, or none (default: both on cuda, none elsewhere)`)
    .option('--peak-tflops <x>', "the device's dense bf16 peak for MFU (default: known GPUs, e.g. 989 for H100/H200)", numberOption('--peak-tflops', 0, Infinity, true))
    .option('--rounds <n>', "alternate mdlm's timed steps with a run of each peer n times and report medians (both hold device memory at once where it fits)", intOption('--rounds', 1), 1)
    .option('--profile <steps>', 'then run this many steps op by op and print where the time goes (cpu, cuda)', intOption('--profile', 1))
    .option('--json', 'print one JSON object: tokens_per_s, mfu, ms_step, peak_mem_gib, the setup, the peers, the speedups (and the profile)')
    .action(async (o: { preset: string; objective: 'ar' | 'mdlm'; backend: string; batch?: number; seqLen?: number; steps: number; warmup: number; precision: (typeof PRECISIONS)[number]; fp8Scaling: (typeof FP8_SCALING_RECIPES)[number]; recompute: Recompute; lossRows?: (typeof LOSS_ROWS)[number]; logitChunks?: number; peer?: string; peakTflops?: number; rounds: number; profile?: number; json?: boolean }) => {
      const backend: BackendChoice = parseBackendChoice(o.backend);
      const peers = parsePeers(o.peer);
      const report = await benchTrain(
        {
          preset: o.preset, objective: o.objective, backend, steps: o.steps, warmup: o.warmup, precision: o.precision, rounds: o.rounds,
          ...(o.batch !== undefined ? { batch: o.batch } : {}), ...(o.seqLen !== undefined ? { seqLen: o.seqLen } : {}),
          ...(o.peakTflops !== undefined ? { peakTflops: o.peakTflops } : {}),
          ...(o.profile !== undefined ? { profileSteps: o.profile } : {}),
          overrides: {
            'train.recompute': o.recompute,
            'train.fp8.scaling': o.fp8Scaling,
            ...(o.logitChunks !== undefined ? { 'train.logitChunks': String(o.logitChunks) } : {}),
            ...(o.lossRows !== undefined ? { 'train.lossRows': o.lossRows } : {}),
          },
          log: (line) => console.error(line),
        },
        peers,
      );
      if (o.json) {
        console.log(JSON.stringify(report, null, 2));
        return;
      }
      console.log(describeThroughput(report));
      if (report.baseline) console.log(`${describeThroughput(report.baseline)}  → fp8 ${report.speedup_vs_baseline!.toFixed(2)}×`);
      if (report.profile) console.log(`\nwhere a step's time goes (${o.profile} steps, each op waited for):\n${formatProfile(report.profile)}`);
      const median = report.rounds ? ` (median of ${report.rounds.length} alternating rounds)` : '';
      for (const mode of Object.keys(report.peers) as PeerMode[]) console.log(`${describeThroughput(report.peers[mode]!)}  → mdlm ${report.speedup[mode]!.toFixed(2)}×${median}`);
    });
  return bench;
}

/** --peer: explicit modes, 'none', or by default 'auto' (both modes when the backend is CUDA). */
function parsePeers(value: string | undefined): PeerMode[] | 'auto' {
  if (value === undefined) return 'auto';
  if (value === 'none') return [];
  return value.split(',').map((m) => choiceOption('--peer', PEER_MODES)(m.trim()));
}
