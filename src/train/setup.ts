/**
 * How a training run is set up, one function for the Trainer and `mdlm bench train` alike: the
 * compute dtype, the objective, what the model trades compute for memory with, the memory check,
 * the kernels' settings, then the model and its optimizer.
 */
import type { Backend } from '../backend/backend.js';
import type { ObjectiveSection, PRECISIONS, TrainConfig, TrainSection } from '../config/schema.js';
import { fail } from '../errors.js';
import { LlamaModel } from '../model/llama.js';
import type { ActivationSaving } from '../model/saving.js';
import { type ParamFiller, flatShard } from '../nn/params.js';
import { ArObjective } from '../objectives/ar.js';
import { MdlmObjective } from '../objectives/mdlm.js';
import type { Objective } from '../objectives/objective.js';
import { AdamW } from '../optim/adamw.js';
import type { FloatDType } from '../tensor.js';
import { fp8ScaleUpdate } from '../ops/fp8_scale_update.js';
import { matmulFp8, matmulFp8Add } from '../ops/matmul_fp8.js';
import { quantizeFp8 } from '../ops/quantize_fp8.js';
import { quantizeFp8Blockwise } from '../ops/quantize_fp8_blockwise.js';
import { type MemoryBreakdown, checkTrainingFits, withMemoryEstimate } from './memory.js';
import type { StepParts } from './step.js';

/** What a run's configuration decides on a backend, before anything is allocated. */
export interface RunPlan {
  readonly dtype: FloatDType;
  readonly objective: Objective;
  /** Whether the model records its pass and replays it (a CUDA graph). */
  readonly record: boolean;
  readonly saving: ActivationSaving;
}

/** A run set up: its plan, the memory it needs, the model and the optimizer. */
export interface TrainingRun extends RunPlan, StepParts {
  readonly memory: MemoryBreakdown;
}

export interface SetupOptions {
  /** The [MASK] id (checked by the caller). */
  readonly maskId: number;
  /** Computes the initial parameter values (default: on this thread). */
  readonly fill?: ParamFiller;
  /** What the model runs its ops on, where that is not the backend itself (a profiler around it). */
  readonly runOn?: Backend;
  /** This process's place among the data-parallel ranks (default: alone), whose shard of the optimizer it keeps under train.zero 1. */
  readonly place?: { readonly rank: number; readonly worldSize: number };
}

/** The ranks the optimizer state is sharded over: the data-parallel ranks under train.zero 1, else 1. */
export function zeroRanks(t: Pick<TrainSection, 'zero'>, worldSize: number): number {
  return t.zero >= 1 ? worldSize : 1;
}

/** The compute dtype, the objective, the recording and the activation saving of `cfg` on `backend`. */
export function planRun(cfg: TrainConfig, backend: Backend, maskId: number): RunPlan {
  if (cfg.train.recompute === 'full' && cfg.train.precision === 'fp8') {
    fail('BAD_CONFIG', 'train.recompute full runs each block\'s forward twice a step, which would record every FP8 amax twice; use train.recompute swiglu (or none) with train.precision fp8');
  }
  const dtype = computeDtype(cfg.train.precision, backend);
  const objective = createObjective(cfg.objective, cfg.train.seed, maskId);
  return { dtype, objective, record: recordsSteps(cfg.train, backend), saving: activationSaving(cfg.train, objective, backend) };
}

/**
 * Set up a training run of `cfg` on `backend`: refused up front (OUT_OF_MEMORY) where the device
 * is known to be too small; the kernels' settings from train.deterministic and train.gemmAutotune;
 * the model (initialised from train.seed) and its AdamW.
 */
export function setUpRun(cfg: TrainConfig, backend: Backend, opts: SetupOptions): TrainingRun {
  const t = cfg.train;
  const plan = planRun(cfg, backend, opts.maskId);
  const place = opts.place ?? { rank: 0, worldSize: 1 };
  const shardedOver = zeroRanks(t, place.worldSize);
  const memory = checkTrainingFits(backend, cfg.model, t.batchSize, plan.dtype, plan.saving, shardedOver);
  backend.configureKernels?.({ gemmAutotune: t.deterministic ? 0 : t.gemmAutotune });
  const model = withMemoryEstimate(memory, () => new LlamaModel(opts.runOn ?? backend, cfg.model, t.batchSize, t.seed, {
    dtype: plan.dtype, record: plan.record, deterministic: t.deterministic, ...plan.saving, ...(opts.fill ? { fill: opts.fill } : {}),
    ...(shardedOver > 1 ? { masterRanks: { worldSize: shardedOver, rank: place.rank } } : {}),
  }));
  try {
    const optimizer = withMemoryEstimate(memory, () => new AdamW(model.store, {
      beta1: t.beta1, beta2: t.beta2, eps: t.adamEps, weightDecay: t.weightDecay, gradClip: t.gradClip,
      ...(shardedOver > 1 ? { shard: flatShard(model.store.size, shardedOver, place.rank) } : {}),
    }));
    return { ...plan, memory, model, optimizer };
  } catch (e) {
    model.destroy();
    throw e;
  }
}

/** Whether training records its forward and backward pass (a CUDA graph: train.cudaGraphs on CUDA). */
export function recordsSteps(t: TrainSection, backend: Pick<Backend, 'name'>): boolean {
  return t.cudaGraphs && backend.name === 'cuda';
}

/**
 * How the model trades compute for memory and runs the loss, from train.*, the objective and the
 * backend: loss rows are packed only where the blocks past the last one are skipped
 * (Backend.skipsConditional: the CPU, WebGPU, or CUDA when the pass is recorded); elsewhere every
 * block runs, so packing would only add work.
 */
export function activationSaving(t: TrainSection, objective: Pick<Objective, 'sparseLoss'>, backend: Pick<Backend, 'name' | 'skipsConditional'>): ActivationSaving {
  const skips = backend.skipsConditional === 'always' || (backend.skipsConditional === 'recorded' && recordsSteps(t, backend));
  return {
    recompute: t.recompute, logitChunks: t.logitChunks, packLossRows: t.lossRows === 'weighted' && objective.sparseLoss && skips,
    ...(t.precision === 'fp8' ? { fp8: { ...t.fp8, historyLen: t.fp8.scaling === 'delayed' ? t.fp8.historyLen : 1 } } : {}),
  };
}

/**
 * train.precision on a backend: the compute dtype (auto, and fp8 around its FP8 GEMMs: bf16 where
 * the kernels are bf16 tensor-core kernels, CUDA; fp16: f16). fp8 needs the backend's FP8 GEMM
 * (CUDA: FP8 tensor cores, sm 8.9 and newer); fp16 needs f16 kernels, which only the CPU backend
 * has.
 */
export function computeDtype(precision: (typeof PRECISIONS)[number], backend: Backend): FloatDType {
  if (precision === 'fp8') requireFp8(backend);
  const dtype = precision === 'fp16' ? 'f16' : precision === 'auto' || precision === 'fp8' ? (backend.name === 'cuda' ? 'bf16' : 'f32') : precision;
  if (!backend.floatDtypes.has(dtype)) {
    const has = [...backend.floatDtypes].filter((d) => d === 'f32' || d === 'bf16' || d === 'f16').join(' or ');
    const fp16 = precision === 'fp16' ? '; fp16 (f16 compute with loss scaling) runs on the cpu backend only: the CUDA kernels are bf16/f32, the WebGPU kernels f32' : '';
    fail('BAD_CONFIG', `train.precision ${precision}: the ${backend.name} backend computes in ${has} only${fp16}; use train.precision auto or f32, or another --backend`);
  }
  return dtype;
}

/** FP8 training's ops on this backend, or a BAD_CONFIG error naming the device and what it lacks. */
export function requireFp8(backend: Backend): void {
  const missing = FP8_OPS.filter((op) => !backend.supports(op));
  if (backend.fp8Unavailable || missing.length > 0) {
    const why = backend.fp8Unavailable ?? `the ${backend.name} backend has no kernels for ${missing.join(', ')}`;
    fail('BAD_CONFIG', `train.precision fp8 on ${backend.description}: ${why}; use train.precision bf16 (or auto)`);
  }
}

/** The ops FP8 training runs besides the others. */
const FP8_OPS = [quantizeFp8.name, quantizeFp8Blockwise.name, matmulFp8.name, matmulFp8Add.name, fp8ScaleUpdate.name];

/** The objective a config section describes; `maskId` is the [MASK] id, checked by the caller. */
export function createObjective(o: ObjectiveSection, seed: number, maskId: number): Objective {
  if (o.kind === 'ar') return new ArObjective();
  return new MdlmObjective({
    maskId, seed, schedule: o.schedule, exponent: o.exponent, tMin: o.tMin, tMax: o.tMax, antithetic: o.antithetic,
    weighting: o.weighting, varilenProb: o.varilenProb, evalNoiseLevels: o.evalNoiseLevels,
  });
}
