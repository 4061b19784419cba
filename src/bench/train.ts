/**
 * `mdlm bench train`: training throughput of a preset on a backend, measured on the trainer's own
 * step (src/train/trainer.ts optimizerStep: objective, forward, backward, gradient norm, AdamW),
 * with synthetic token windows so data loading never limits it. Reports tokens/s, ms per step,
 * MFU ((6·N + attention) FLOPs per token × tokens/s over the GPU's dense bf16 peak) and the
 * device memory the backend's pool holds. The PyTorch peer (bench/peers/train_torch.py: the same
 * model, objective, shapes and FLOP count) runs in the same command, eager and torch.compile.
 * With rounds > 1, mdlm's timed steps and the peers' runs alternate, and the figures are medians
 * over the rounds: one sample of the ratio is noisy, a median of alternating samples less so.
 */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { Backend } from '../backend/backend.js';
import { resolveConfig } from '../config/load.js';
import { flopsBreakdown, paramCount } from '../config/model-size.js';
import { logitChunksOf } from '../model/saving.js';
import type { TrainConfig } from '../config/schema.js';
import { fail } from '../errors.js';
import type { TokenBatch } from '../objectives/objective.js';
import { ProfiledBackend } from './profile.js';
import { PhiloxStream, RngPurpose } from '../rng/philox.js';
import { type BackendChoice, PACKAGE_ROOT, createBackend } from '../runtime/backends.js';
import { KNOBS } from '../runtime/knobs.js';
import { parallelFiller } from '../runtime/parallel_init.js';
import { gib } from '../train/memory.js';
import { planRun, setUpRun } from '../train/setup.js';
import { Lookahead, optimizerStep } from '../train/step.js';

export const PEER_MODES = ['eager', 'compile'] as const;
export type PeerMode = (typeof PEER_MODES)[number];

export interface BenchTrainOptions {
  readonly preset: string;
  readonly objective: 'ar' | 'mdlm';
  readonly backend: BackendChoice;
  /** Sequences per step (default: the preset's micro-batch). */
  readonly batch?: number;
  /** Tokens per sequence (default: the preset's). */
  readonly seqLen?: number;
  readonly steps: number;
  readonly warmup: number;
  readonly precision: TrainConfig['train']['precision'];
  /** Dense bf16 peak of the device in TFLOP/s for MFU (default: known GPUs, else no MFU). */
  readonly peakTflops?: number;
  /** Steps to run op by op after the timed ones, for the per-op breakdown (0: none). */
  readonly profileSteps?: number;
  /**
   * Rounds of `steps` timed mdlm steps, each followed by one run of every peer (default 1: mdlm,
   * then the peers once its memory is freed; with more, both hold device memory at once, unless
   * the device is too small for that: peersFitBeside).
   */
  readonly rounds?: number;
  /** Config overrides (dotted keys), applied last. */
  readonly overrides?: Readonly<Record<string, string>>;
  readonly log?: (line: string) => void;
  /** The Python that runs the PyTorch peers (default: PYTHON, else python3). */
  readonly python?: string;
}

/** One side of the comparison; the keys the issue asks `--json` for come first. */
export interface TrainThroughput {
  readonly tokens_per_s: number;
  readonly mfu: number | null;
  readonly ms_step: number;
  readonly peak_mem_gib: number;
  readonly impl: string;
  readonly device: string;
  readonly precision: string;
  readonly steps: number;
  /** Mean loss of the timed steps (a sanity check that both sides train the same thing). */
  readonly loss: number;
}

export interface BenchTrainSetup {
  readonly preset: string;
  readonly objective: 'ar' | 'mdlm';
  readonly batch: number;
  readonly seq_len: number;
  readonly params: number;
  readonly flops_per_token: number;
  readonly flops_convention: string;
  readonly peak_tflops: number | null;
  /** mdlm's train.recompute, train.logitChunks (resolved) and train.lossRows (the peers keep what autograd keeps, and run the head over every row). */
  readonly recompute: TrainConfig['train']['recompute'];
  readonly logit_chunks: number;
  readonly loss_rows: 'packed' | 'all';
  /** The model fields the PyTorch peer is built from. */
  readonly model: TrainConfig['model'];
}

/** Dense bf16 tensor-core peaks (TFLOP/s, no sparsity) by device name. */
const BF16_PEAKS: readonly [RegExp, number][] = [
  [/\bH200\b/, 989],
  [/\bH100\b/, 989],
  [/\bH800\b/, 989],
  [/\bA100\b/, 312],
  [/\bL40S\b/, 362],
  [/\bB200\b/, 2250],
];

export function bf16PeakTflops(device: string): number | undefined {
  return BF16_PEAKS.find(([re]) => re.test(device))?.[1];
}

/** The configuration a bench run trains: the preset at the given shapes, one micro-batch per step. */
export function benchConfig(opts: BenchTrainOptions): TrainConfig {
  const overrides: Record<string, string> = { 'objective.kind': opts.objective, 'train.gradAccum': '1', 'train.precision': opts.precision };
  if (opts.batch !== undefined) overrides['train.batchSize'] = String(opts.batch);
  if (opts.seqLen !== undefined) overrides['model.seqLen'] = String(opts.seqLen);
  return resolveConfig({ preset: opts.preset, overrides: { ...overrides, ...opts.overrides } });
}

/** The [MASK] id of a bench run: the config's, else the last id of the vocabulary (synthetic batches stay below it). */
function benchMaskId(cfg: TrainConfig): number {
  return cfg.objective.maskTokenId ?? cfg.model.vocabSize - 1;
}

export function benchSetup(cfg: TrainConfig, preset: string, peakTflops: number | undefined, backend: Backend): BenchTrainSetup {
  const f = flopsBreakdown(cfg.model, cfg.model.seqLen, cfg.objective.kind);
  const { saving } = planRun(cfg, backend, benchMaskId(cfg));
  return {
    preset, objective: cfg.objective.kind, batch: cfg.train.batchSize, seq_len: cfg.model.seqLen, params: paramCount(cfg.model),
    flops_per_token: f.total, flops_convention: f.convention, peak_tflops: peakTflops ?? null, recompute: cfg.train.recompute,
    logit_chunks: logitChunksOf(saving), loss_rows: saving.packLossRows ? 'packed' : 'all', model: cfg.model,
  };
}

/** Random token windows (ids below the [MASK] id), a fresh batch per call, the same for a seed. */
export function syntheticBatches(batch: number, seqLen: number, maxId: number, seed: number): () => TokenBatch {
  const rng = new PhiloxStream(seed, RngPurpose.dataOrder);
  const n = batch * seqLen;
  const positions = Int32Array.from({ length: n }, (_, i) => i % seqLen);
  const segIds = new Int32Array(n);
  return () => {
    const row = Int32Array.from({ length: n + batch }, () => rng.int(maxId));
    const tokens = new Int32Array(n);
    const targets = new Int32Array(n);
    for (let r = 0; r < batch; r++) {
      const src = row.subarray(r * (seqLen + 1), (r + 1) * (seqLen + 1));
      tokens.set(src.subarray(0, seqLen), r * seqLen);
      targets.set(src.subarray(1), r * seqLen);
    }
    return { batchSize: batch, seqLen, tokens, targets, segIds, positions };
  };
}

/** One op (and argument shapes) of the per-op breakdown: its calls and time per step, its share. */
export interface OpProfileRow {
  readonly op: string;
  readonly shapes: string;
  readonly calls_per_step: number;
  readonly ms_per_step: number;
  readonly share: number;
}

/**
 * mdlm's side: `warmup` untimed steps, then `steps` timed ones (each ends with the loss read back);
 * then, with `profileSteps`, that many more op by op (each op waited for and timed: see
 * ProfiledBackend), for the breakdown.
 */
export async function benchTrainMdlm(
  cfg: TrainConfig, setup: BenchTrainSetup, backend: Backend, steps: number, warmup: number, profileSteps = 0,
  rounds = 1, afterRound: (round: number, msStep: number) => void = () => {},
): Promise<TrainThroughput & { profile?: OpProfileRow[]; rounds_ms_step: number[] }> {
  const t = cfg.train;
  const maskId = benchMaskId(cfg);
  const profiler = profileSteps > 0 ? ProfiledBackend.of(backend) : null;
  const parts = setUpRun(cfg, backend, { maskId, fill: parallelFiller(), ...(profiler ? { runOn: profiler } : {}) });
  const { model, optimizer, dtype } = parts;
  try {
    const batches = new Lookahead(syntheticBatches(t.batchSize, cfg.model.seqLen, maskId, t.seed), () => undefined);
    for (let s = 0; s < warmup; s++) await optimizerStep(parts, batches, s, 1, t.lr, 'skip');
    await backend.sync();
    let loss = 0;
    const windows: number[] = [];
    for (let r = 0; r < rounds; r++) {
      const started = performance.now();
      for (let s = 0; s < steps; s++) loss += (await optimizerStep(parts, batches, warmup + r * steps + s, 1, t.lr, 'skip')).loss;
      await backend.sync();
      windows.push((performance.now() - started) / steps);
      afterRound(r, windows[r]!);
    }
    const msStep = median(windows);
    const tokensPerS = (t.batchSize * cfg.model.seqLen) / (msStep / 1000);
    const pool = backend.poolStats();
    let profile: OpProfileRow[] | undefined;
    if (profiler) {
      model.stopRecording();
      profiler.timing = true;
      for (let s = 0; s < profileSteps; s++) await optimizerStep(parts, batches, warmup + rounds * steps + s, 1, t.lr, 'skip');
      profiler.timing = false;
      const rows = profiler.report();
      const total = rows.reduce((a, r) => a + r.ms, 0);
      profile = rows.map((r) => ({ op: r.op, shapes: r.shapes, calls_per_step: r.calls / profileSteps, ms_per_step: r.ms / profileSteps, share: r.ms / total }));
    }
    return {
      tokens_per_s: tokensPerS,
      mfu: setup.peak_tflops ? (tokensPerS * setup.flops_per_token) / (setup.peak_tflops * 1e12) : null,
      ms_step: msStep,
      peak_mem_gib: (pool.liveBytes + pool.pooledBytes) / 2 ** 30,
      impl: `mdlm ${backend.name}`,
      device: backend.description,
      precision: t.precision === 'fp8' ? 'fp8' : dtype,
      steps,
      loss: loss / (rounds * steps),
      rounds_ms_step: windows,
      ...(profile ? { profile } : {}),
    };
  } finally {
    optimizer.destroy();
    model.destroy();
  }
}

/**
 * Whether a PyTorch peer can run while mdlm holds `heldBytes` of a device of `memoryBytes` (unknown:
 * assumed so). The peer's peak is a few percent above mdlm's at the same configuration, so it is
 * taken as 1.1× mdlm's, plus 1 GiB for the second process's CUDA context.
 */
export function peersFitBeside(heldBytes: number, memoryBytes: number | undefined): boolean {
  return memoryBytes === undefined || heldBytes * 2.1 + 2 ** 30 <= memoryBytes;
}

export const TORCH_PEER = join(PACKAGE_ROOT, 'bench', 'peers', 'train_torch.py');

/** The PyTorch peer in `mode`, on the same model, objective and shapes; its one JSON line parsed. */
export function benchTrainTorch(setup: BenchTrainSetup, cfg: TrainConfig, mode: PeerMode, steps: number, warmup: number, python = KNOBS.python): TrainThroughput {
  if (!existsSync(TORCH_PEER)) fail('NOT_FOUND', `bench train: the PyTorch peer ${TORCH_PEER} is missing`);
  const m = setup.model;
  const o = cfg.objective;
  const args = [
    TORCH_PEER, '--mode', mode, '--objective', setup.objective, '--batch', String(setup.batch), '--seq-len', String(setup.seq_len),
    '--vocab', String(m.vocabSize), '--d-model', String(m.dModel), '--layers', String(m.nLayers), '--heads', String(m.nHeads),
    '--kv-heads', String(m.nKvHeads), '--ffn', String(m.ffnHidden), '--rope-theta', String(m.ropeTheta), '--norm-eps', String(m.normEps),
    '--init-std', String(m.initStd), ...(m.tieEmbeddings ? ['--tie-embeddings'] : []), '--t-min', String(o.tMin),
    '--lr', String(cfg.train.lr), '--weight-decay', String(cfg.train.weightDecay), '--beta1', String(cfg.train.beta1), '--beta2', String(cfg.train.beta2),
    '--grad-clip', String(cfg.train.gradClip), '--steps', String(steps), '--warmup', String(warmup),
    '--flops-per-token', String(setup.flops_per_token), ...(setup.peak_tflops ? ['--peak-tflops', String(setup.peak_tflops)] : []),
  ];
  const r = spawnSync(python, args, { encoding: 'utf8', maxBuffer: 16 << 20 });
  if (r.error) fail('NOT_FOUND', `bench train: could not run ${python} for the PyTorch peer (${r.error.message}); pass --peer none, or set PYTHON`);
  const line = r.stdout.trim().split('\n').filter((l) => l.startsWith('{')).at(-1);
  if (r.status !== 0 || !line) {
    fail('BACKEND_UNAVAILABLE', `bench train: the PyTorch peer (${mode}) failed with exit code ${r.status}: ${(r.stderr || r.stdout).trim().split('\n').slice(-5).join(' | ')}`);
  }
  return JSON.parse(line) as TrainThroughput;
}

export interface BenchTrainReport extends TrainThroughput {
  readonly setup: BenchTrainSetup;
  /** With profileSteps: mdlm's time per op and shapes, largest first. */
  readonly profile?: OpProfileRow[];
  /** The PyTorch peer's runs, by mode. */
  readonly peers: Partial<Record<PeerMode, TrainThroughput>>;
  /** mdlm tokens/s over each peer's (with rounds: the median of the rounds' ratios). */
  readonly speedup: Partial<Record<PeerMode, number>>;
  /** With --precision fp8: mdlm's own run of the same configuration in bf16 (the compute dtype), on a fresh backend after the FP8 one. */
  readonly baseline?: TrainThroughput;
  /** FP8 tokens/s over the bf16 baseline's. */
  readonly speedup_vs_baseline?: number;
  /** With rounds > 1, each round's tokens/s, mdlm's and each peer's, and their ratio. */
  readonly rounds?: readonly BenchRound[];
}

export interface BenchRound {
  readonly mdlm_tokens_per_s: number;
  readonly peers: Partial<Record<PeerMode, number>>;
  readonly speedup: Partial<Record<PeerMode, number>>;
}

/** The median (the mean of the middle two for an even count). */
export function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const h = Math.floor(s.length / 2);
  return s.length % 2 ? s[h]! : (s[h - 1]! + s[h]!) / 2;
}

/**
 * mdlm on the backend, then each requested PyTorch mode, on the same configuration. 'auto' peers:
 * both modes when the backend is CUDA (a PyTorch peer on another device would compare nothing).
 */
export async function benchTrain(opts: BenchTrainOptions, peerChoice: readonly PeerMode[] | 'auto'): Promise<BenchTrainReport> {
  const log = opts.log ?? (() => {});
  const cfg = benchConfig(opts);
  const backend = await createBackend(opts.backend);
  const peerModes = peerChoice === 'auto' ? (backend.name === 'cuda' ? PEER_MODES : []) : peerChoice;
  const rounds = opts.rounds ?? 1;
  // With rounds, the peers run between mdlm's timed windows (where the device holds both); else
  // after mdlm has freed its memory.
  let interleave = rounds > 1 && peerModes.length > 0;
  const runs: Partial<Record<PeerMode, TrainThroughput[]>> = {};
  const runPeers = (): void => {
    for (const mode of peerModes) {
      log(`PyTorch ${mode}: ${opts.warmup} warmup + ${opts.steps} timed steps`);
      const theirs = benchTrainTorch(setup, cfg, mode, opts.steps, opts.warmup, opts.python);
      (runs[mode] ??= []).push(theirs);
      log(describeThroughput(theirs));
    }
  };
  let mine: TrainThroughput & { profile?: OpProfileRow[]; rounds_ms_step: number[] };
  let setup!: BenchTrainSetup;
  try {
    if (peerModes.length > 0 && cfg.objective.kind === 'mdlm' && cfg.objective.schedule !== 'linear') {
      fail('BAD_CONFIG', `bench train: the PyTorch peer implements the linear schedule only; objective.schedule is ${cfg.objective.schedule}`);
    }
    setup = benchSetup(cfg, opts.preset, opts.peakTflops ?? bf16PeakTflops(backend.description), backend);
    log(`bench train: ${opts.preset} ${setup.objective}, batch ${setup.batch} × ${setup.seq_len}, ${(setup.params / 1e6).toFixed(1)}M parameters, ${(setup.flops_per_token / 1e9).toFixed(3)} GFLOP/token (${setup.flops_convention})`);
    log(`mdlm runs the LM head and the loss over ${setup.loss_rows === 'packed' ? 'the rows with a loss weight, packed,' : 'every row'} in ${setup.logit_chunks} block${setup.logit_chunks > 1 ? 's' : ''}${setup.recompute !== 'none' ? `; recomputes ${setup.recompute}` : ''}`);
    log(`mdlm on ${backend.description}: ${opts.warmup} warmup + ${rounds > 1 ? `${rounds} rounds of ` : ''}${opts.steps} timed steps`);
    mine = await benchTrainMdlm(cfg, setup, backend, opts.steps, opts.warmup, opts.profileSteps ?? 0, rounds, (r, ms) => {
      if (rounds > 1) log(`mdlm round ${r + 1} of ${rounds}: ${ms.toFixed(2)} ms/step`);
      if (r === 0 && interleave) {
        const pool = backend.poolStats();
        const held = pool.liveBytes + pool.pooledBytes;
        if (!peersFitBeside(held, backend.memoryBytes)) {
          interleave = false;
          log(`bench train: the device's ${gib(backend.memoryBytes!)} cannot hold mdlm's ${gib(held)} and a peer's (about as much) at once: the peers run after mdlm has freed its memory`);
        }
      }
      if (interleave) runPeers();
    });
  } finally {
    backend.destroy();
  }
  log(describeThroughput(mine));
  let baseline: TrainThroughput | undefined;
  if (cfg.train.precision === 'fp8') {
    // The bf16 configuration on a backend of its own, so that neither run's peak memory holds the other's pooled buffers.
    const bf16 = benchConfig({ ...opts, precision: 'auto' });
    const again = await createBackend(opts.backend);
    log(`mdlm on ${again.description}, the same configuration in ${bf16.train.precision === 'auto' ? 'its compute dtype' : bf16.train.precision}: ${opts.warmup} warmup + ${rounds > 1 ? `${rounds} rounds of ` : ''}${opts.steps} timed steps`);
    try {
      const { rounds_ms_step: _r, profile: _p, ...b } = await benchTrainMdlm(bf16, setup, again, opts.steps, opts.warmup, 0, rounds);
      baseline = b;
    } finally {
      again.destroy();
    }
    log(`${describeThroughput(baseline)}  → fp8 ${(mine.tokens_per_s / baseline.tokens_per_s).toFixed(2)}×`);
  }
  if (!interleave) for (let r = 0; r < rounds; r++) runPeers();
  const tokens = setup.batch * setup.seq_len;
  const mineRound = mine.rounds_ms_step.map((ms) => tokens / (ms / 1000));
  const peers: Partial<Record<PeerMode, TrainThroughput>> = {};
  const speedup: Partial<Record<PeerMode, number>> = {};
  for (const mode of peerModes) {
    const list = runs[mode]!;
    // The peer's run at its median tokens/s (the lower middle one for an even count): a real run.
    peers[mode] = [...list].sort((a, b) => a.tokens_per_s - b.tokens_per_s)[Math.floor((list.length - 1) / 2)]!;
    speedup[mode] = median(list.map((p, r) => mineRound[r]! / p.tokens_per_s));
    log(`PyTorch ${mode}: mdlm is ${speedup[mode]!.toFixed(2)}× its tokens/s${rounds > 1 ? ` (median of ${rounds} rounds)` : ''}`);
  }
  const { rounds_ms_step: _, ...report } = mine;
  const perRound: BenchRound[] | undefined = rounds > 1
    ? mineRound.map((m, r) => ({
        mdlm_tokens_per_s: m,
        peers: Object.fromEntries(peerModes.map((mode) => [mode, runs[mode]![r]!.tokens_per_s])),
        speedup: Object.fromEntries(peerModes.map((mode) => [mode, m / runs[mode]![r]!.tokens_per_s])),
      }))
    : undefined;
  return {
    ...report, setup, peers, speedup, ...(perRound ? { rounds: perRound } : {}),
    ...(baseline ? { baseline, speedup_vs_baseline: mine.tokens_per_s / baseline.tokens_per_s } : {}),
  };
}

/** The breakdown as a table: ms and share per step for the ops above `minShare`, then the rest summed. */
export function formatProfile(rows: readonly OpProfileRow[], minShare = 0.005): string {
  const shown = rows.filter((r) => r.share >= minShare);
  const rest = rows.filter((r) => r.share < minShare);
  const line = (op: string, calls: string, ms: number, share: number, shapes: string) =>
    `${op.padEnd(24)} ${calls.padStart(6)} ${ms.toFixed(3).padStart(10)} ${(100 * share).toFixed(1).padStart(6)}%  ${shapes}`;
  return [
    `${'op'.padEnd(24)} ${'calls'.padStart(6)} ${'ms/step'.padStart(10)} ${'share'.padStart(7)}  argument shapes`,
    ...shown.map((r) => line(r.op, String(r.calls_per_step), r.ms_per_step, r.share, r.shapes)),
    ...(rest.length ? [line(`(${rest.length} more)`, String(rest.reduce((a, r) => a + r.calls_per_step, 0)), rest.reduce((a, r) => a + r.ms_per_step, 0), rest.reduce((a, r) => a + r.share, 0), '')] : []),
  ].join('\n');
}

export function describeThroughput(r: TrainThroughput): string {
  // MFU is always against the dense bf16 peak, FP8 runs included (whose own peak is twice that).
  const mfu = r.mfu === null ? '' : `, MFU ${(100 * r.mfu).toFixed(1)}%${r.precision === 'fp8' ? ' of the bf16 peak' : ''}`;
  return `${r.impl} (${r.precision}): ${Math.round(r.tokens_per_s).toLocaleString('en-US')} tokens/s, ${r.ms_step.toFixed(1)} ms/step${mfu}, peak ${r.peak_mem_gib.toFixed(2)} GiB, loss ${r.loss.toFixed(4)}`;
}
