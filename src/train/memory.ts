/**
 * Out of memory at setup, said up front: the device bytes a training run needs (weights,
 * gradients, AdamW state, working copy, activations: trainingMemory, read off the model's and the
 * optimizer's own allocations in a dry run) against what the device has, and the same breakdown
 * on any allocation that fails while the run is being set up.
 */
import type { Backend } from '../backend/backend.js';
import type { ModelConfig } from '../config/schema.js';
import { MdlmError, fail } from '../errors.js';
import { LlamaModel } from '../model/llama.js';
import { PlanBackend } from '../model/plan.js';
import type { ActivationSaving } from '../model/saving.js';
import { flatShard } from '../nn/params.js';
import { AdamW } from '../optim/adamw.js';
import type { FloatDType } from '../tensor.js';

export interface MemoryBreakdown {
  /** f32 master weights, their f32 gradients, AdamW's state (two f32 moments; flat, padded). */
  readonly weights: number;
  readonly grads: number;
  readonly optimizer: number;
  /** The working copy in the compute dtype (none under f32: the masters are read directly). */
  readonly workingCopy: number;
  /** Activations, saved tensors, inputs and backward scratch: the model's arena. */
  readonly activations: number;
  /** FP8 training: the FP8 weights (and their transposes), the quantised operands' scratch and the scaling state. */
  readonly fp8: number;
  readonly total: number;
}

/**
 * Bytes a training model and its AdamW hold on the device at `batch` sequences of m.seqLen, per
 * rank when the optimizer is sharded over `zeroRanks` ranks (train.zero 1: the AdamW moments of the
 * largest shard, and its f32 masters under a narrower compute dtype; the gradients and the working
 * copy stay whole on every rank): the
 * model and the optimizer built against an allocation plan (src/model/plan.ts), which allocates
 * nothing and computes no initial values, and their tensors summed. The backend's pool rounds each
 * buffer up to 256 bytes, and kernels keep some scratch of their own (CUDA: the arena and
 * cuBLASLt's workspace), so the device needs a little more.
 */
export function trainingMemory(m: ModelConfig, batch: number, dtype: FloatDType, saving: ActivationSaving = {}, zeroRanks = 1): MemoryBreakdown {
  const plan = new PlanBackend();
  // Sharded, rank 0's shard is the largest.
  const model = new LlamaModel(plan, m, batch, 0, { dtype, ...saving, fill: null, ...(zeroRanks > 1 ? { masterRanks: { worldSize: zeroRanks, rank: 0 } } : {}) });
  const store = model.store;
  const before = plan.allocatedBytes;
  // The optimizer's sizes follow the parameters' layout alone, not its settings.
  const shard = zeroRanks > 1 ? { shard: flatShard(store.size, zeroRanks, 0) } : {};
  new AdamW(store, { beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0, gradClip: 0, ...shard });
  const optimizer = plan.allocatedBytes - before;
  const weights = store.value.byteSize;
  const grads = store.grad.byteSize;
  const workingCopy = store.workingCopy?.byteSize ?? 0;
  const activations = model.activationBytes;
  const fp8 = model.fp8?.bytes ?? 0;
  plan.destroy();
  return { weights, grads, optimizer, workingCopy, activations, fp8, total: weights + grads + optimizer + workingCopy + activations + fp8 };
}

/** Room left for the CUDA context, the kernels' scratch arena and cuBLASLt's workspace: 2 GiB, or a tenth of a small device. */
export function deviceReserve(memoryBytes: number): number {
  return Math.min(2 * 2 ** 30, memoryBytes / 10);
}

/** Bytes for a message: GiB with two decimals, or MiB below one GiB. */
export function gib(bytes: number): string {
  return bytes >= 2 ** 30 ? `${(bytes / 2 ** 30).toFixed(2)} GiB` : `${(bytes / 2 ** 20).toFixed(1)} MiB`;
}

export function describeMemory(e: MemoryBreakdown): string {
  return `${gib(e.total)}: weights ${gib(e.weights)}, gradients ${gib(e.grads)}, AdamW state ${gib(e.optimizer)}${e.workingCopy ? `, working copy ${gib(e.workingCopy)}` : ''}, activations ${gib(e.activations)}${e.fp8 ? `, FP8 weights and scratch ${gib(e.fp8)}` : ''}`;
}

const ADVICE = 'lower train.batchSize (and raise train.gradAccum to keep the tokens per step), model.seqLen or the model size, or use train.precision bf16, train.recompute swiglu or train.logitChunks';

/** The estimate for this run; an OUT_OF_MEMORY error now if the device is known to be too small. */
export function checkTrainingFits(backend: Backend, m: ModelConfig, batch: number, dtype: FloatDType, saving: ActivationSaving = {}, zeroRanks = 1): MemoryBreakdown {
  const est = trainingMemory(m, batch, dtype, saving, zeroRanks);
  const have = backend.memoryBytes;
  if (have !== undefined && est.total + deviceReserve(have) > have) {
    fail('OUT_OF_MEMORY', `this run needs about ${describeMemory(est)}, plus ~${gib(deviceReserve(have))} for the runtime, but ${backend.description} has ${gib(have)}; ${ADVICE}`);
  }
  return est;
}

/** fn(), with an allocation failure's message extended by the run's estimate. */
export function withMemoryEstimate<T>(est: MemoryBreakdown, fn: () => T): T {
  try {
    return fn();
  } catch (e) {
    if (e instanceof MdlmError && e.code === 'OUT_OF_MEMORY') throw new MdlmError('OUT_OF_MEMORY', `${e.message}. This run needs about ${describeMemory(est)}; ${ADVICE}`);
    throw e;
  }
}
