/**
 * The one validated training configuration. Every field has a default and a description (the CLI
 * turns them into flags and help text through `configFields()` in ./load.ts). Objects are strict:
 * an unknown key is an error, not silently ignored.
 *
 * The defaults are the `small` preset (≈10M parameters, byte tokenizer, seq 256): a run that works
 * on CPU / WebGPU without any flag.
 *
 * Derived defaults (filled after parsing, so `TrainConfig` has every field):
 *   model.nKvHeads     = model.nHeads                          (multi-head attention)
 *   model.ffnHidden    = ceil(8·dModel/3 / 64)·64              (Llama's SwiGLU sizing, multiple of 64)
 *   model.vocabSize    = the data tokenizer's ids (+ [MASK] for mdlm where it has none), padded
 *                        (src/config/vocab.ts): byte 264, gpt2 50304
 *   objective.maskTokenId = the tokenizer's [MASK] (added as the next free id where it has none:
 *                        byte 257, gpt2 50257); unused under ar, where it is model.vocabSize − 1
 *   sft.pack           = true for ar, false for mdlm
 *   sft.padding        = none for ar, eos for mdlm
 *
 * The tokenizer is the built-in one `data.tokenizer` names, or the one `trainConfigSchema` is given
 * (what `mdlm train` loaded for the data: a tokenizer.json, a prepared dataset's).
 */
import * as z from 'zod';
import { type TokenizerShape, builtinTokenizer, paddedVocabSize, vocabularyNeeds } from './vocab.js';

const int = (min: number) => z.number().int().min(min);
const pos = () => z.number().positive();
const nonNeg = () => z.number().min(0);

export const SCHEDULES = ['linear', 'cosine', 'polynomial', 'loglinear'] as const;
export const OBJECTIVES = ['ar', 'mdlm'] as const;
export const WEIGHTINGS = ['elbo', 'empirical'] as const;
export const DATA_MODES = ['window', 'packed'] as const;
export const DATA_FORMATS = ['tokens', 'chat'] as const;
export type DataFormat = (typeof DATA_FORMATS)[number];
export const SFT_PADDING = ['eos', 'none'] as const;
export const LR_DECAYS = ['cosine', 'wsd', 'constant'] as const;
export const BACKENDS = ['auto', 'cpu', 'webgpu', 'cuda'] as const;
export const NON_FINITE = ['stop', 'skip'] as const;
export const PRECISIONS = ['auto', 'f32', 'bf16', 'fp16', 'fp8'] as const;
export const FP8_SCALING_RECIPES = ['delayed', 'current', 'blockwise'] as const;
export const RECOMPUTE = ['none', 'swiglu', 'full'] as const;
export const LOSS_ROWS = ['weighted', 'all'] as const;
export type Recompute = (typeof RECOMPUTE)[number];

export const ModelSchema = z.strictObject({
  vocabSize: int(2).optional().describe("Vocabulary size (embedding rows). Default: the data tokenizer's ids, with the [MASK] masked diffusion adds where the tokenizer has none, rounded up to a multiple of 64 (of 8 up to 512 ids): 264 for byte, 50304 for gpt2. Set, it must hold every token id and the [MASK]."),
  dModel: int(1).default(384).describe('Hidden size d of the residual stream.'),
  nLayers: int(1).default(6).describe('Number of transformer blocks.'),
  nHeads: int(1).default(6).describe('Number of attention (query) heads; must divide model.dModel.'),
  nKvHeads: int(1).optional().describe('Number of key/value heads (grouped-query attention); must divide model.nHeads. Default: model.nHeads.'),
  ffnHidden: int(1).optional().describe('SwiGLU hidden size (gate/up projection width). Default: ceil(8·dModel/3 / 64)·64.'),
  seqLen: int(1).default(256).describe('Maximum sequence length (positions); training windows have this length.'),
  ropeTheta: pos().default(10000).describe('RoPE base frequency θ.'),
  normEps: pos().default(1e-5).describe('RMSNorm epsilon.'),
  qkNorm: z.boolean().default(false).describe('RMSNorm on queries and keys per head before RoPE (Qwen3 / OLMo2 style).'),
  qkvBias: z.boolean().default(false).describe('Biases on the q/k/v projections (Qwen2 style). Needed to import Qwen2 checkpoints.'),
  tieEmbeddings: z.boolean().default(true).describe('Share the token embedding matrix with the output projection (lm_head).'),
  initStd: pos().default(0.02).describe('Standard deviation of the normal initialisation of weight matrices.'),
});

export const ObjectiveSchema = z.strictObject({
  kind: z.enum(OBJECTIVES).default('mdlm').describe('Training objective: ar (causal, next-token CE) or mdlm (bidirectional, absorbing-[MASK] diffusion).'),
  schedule: z.enum(SCHEDULES).default('linear').describe('mdlm noise schedule α(t): linear 1−t, cosine cos(πt/2), polynomial 1−t^exponent, loglinear (MDLM/SEDD log-linear noise σ(t) = −log(1 − (1−ε)t), i.e. α(t) = 1 − (1−ε)t with ε = 1e-3).'),
  exponent: pos().default(1).describe('Exponent of the polynomial schedule α(t) = 1 − t^exponent (ignored by the other schedules).'),
  tMin: z.number().min(0).default(1e-3).describe('Smallest noise level ε: t ~ U(tMin, tMax). Keeps the 1/t ELBO weight finite.'),
  tMax: z.number().max(1).default(1).describe('Largest noise level: t ~ U(tMin, tMax).'),
  antithetic: z.boolean().default(true).describe('Low-discrepancy t across the batch (stratified: t_i = (u + i/B) mod 1), lowering the variance of the loss.'),
  weighting: z.enum(WEIGHTINGS).default('elbo').describe("mdlm loss weight: elbo = the schedule's ELBO weight (1/t for linear); empirical = MegaDLMs' 1/p with p the realised masked fraction of the sequence. Evaluation always reports the ELBO."),
  varilenProb: z.number().min(0).max(1).default(0).describe('mdlm: probability that a training sequence keeps only a random-length prefix (2..model.seqLen tokens); the rest of its row is out of the loss and of attention. MegaDLMs uses 0.01.'),
  evalNoiseLevels: int(1).default(8).describe('Number of fixed, evenly spaced noise levels t at which the ELBO is evaluated (mdlm eval).'),
  maskTokenId: int(0).optional().describe("Token id of [MASK] (mdlm). Default: the tokenizer's [MASK], added as the next free id where it has none (byte 257, gpt2 50257); the tokenizer saved with the checkpoint names it."),
});

export const DataSchema = z.strictObject({
  path: z.string().min(1).optional().describe('Training data: a text file, a token shard directory or a Megatron .bin/.idx prefix. Default: the built-in Brown corpus.'),
  tokenizer: z.string().min(1).default('byte').describe('Tokenizer: byte, gpt2, or a path to a Hugging Face tokenizer.json.'),
  mode: z.enum(DATA_MODES).default('packed').describe('Token data: window: random windows of model.seqLen tokens; packed: documents packed back to back, separated by EOS. (Chat data is laid out by sft.*.)'),
  format: z.enum(DATA_FORMATS).default('tokens').describe("tokens: every token is trained on (pretraining). chat: conversations (prepared by mdlm data prepare --format chat, or JSON Lines of {\"messages\": [...]} or {\"prompt\", \"response\"} objects prepared into <out>/data with data.tokenizer's chat template or the built-in one), whole conversations a row, the loss on the assistant's tokens only: supervised fine-tuning, laid out by sft.*."),
  valFraction: z.number().min(0).max(0.5).default(0.01).describe('Probability that a document goes to validation when text is prepared; in a small corpus more documents move over until validation holds the minimum of docs/DATA_FORMAT.md.'),
});

export const TrainSchema = z.strictObject({
  steps: int(1).default(2000).describe('Number of optimizer steps.'),
  batchSize: int(1).default(32).describe('Sequences per micro-batch (per rank).'),
  gradAccum: int(1).default(1).describe('Micro-batches accumulated per optimizer step.'),
  lr: pos().default(1e-3).describe('Peak learning rate.'),
  minLr: nonNeg().default(1e-4).describe('Learning rate at the end of the decay.'),
  warmupSteps: int(0).default(100).describe('Linear warmup steps from 0 to train.lr.'),
  decay: z.enum(LR_DECAYS).default('cosine').describe('Learning-rate decay after warmup: cosine to minLr, wsd (warmup-stable-decay: constant, then linear to minLr over the last wsdDecayFraction of steps) or constant.'),
  wsdDecayFraction: z.number().min(0).max(1).default(0.2).describe('Fraction of train.steps spent decaying in the wsd schedule.'),
  weightDecay: nonNeg().default(0.1).describe('AdamW decoupled weight decay on the matrices (the embedding and LM head included); norms and biases take none.'),
  beta1: z.number().min(0).lt(1).default(0.9).describe('AdamW β1.'),
  beta2: z.number().min(0).lt(1).default(0.95).describe('AdamW β2.'),
  adamEps: pos().default(1e-8).describe('AdamW ε.'),
  gradClip: nonNeg().default(1).describe('Clip the global gradient norm to this value (0 = no clipping).'),
  evalEvery: int(0).default(250).describe('Evaluate every this many steps (0 = only at the end).'),
  evalBatches: int(1).default(20).describe('Validation batches per evaluation.'),
  saveEvery: int(0).default(1000).describe('Save a checkpoint every this many steps (0 = only at the end).'),
  keepCheckpoints: int(0).default(3).describe('Keep only the newest this many checkpoints (0 = keep all).'),
  logEvery: int(1).default(10).describe('Log training metrics every this many steps.'),
  seed: int(0).default(1234).describe('Seed of every random draw (init, data order, noise levels, masks).'),
  nonFinite: z.enum(NON_FINITE).default('stop').describe('On a NaN/Inf loss or gradient: stop the run (nothing is saved) or skip the step.'),
  maxSkippedSteps: int(1).default(10).describe('With nonFinite skip: stop the run, saving nothing new, after this many skipped steps in a row (a run whose every step is skipped stops at its end however few).'),
  cudaGraphs: z.boolean().default(true).describe('CUDA: record the forward and backward pass as a CUDA graph at the second micro-batch and replay it from then on (one launch instead of hundreds). Other backends run the pass directly either way.'),
  deterministic: z.boolean().default(false).describe('The same bits on every run of the same config on the same GPU. On CUDA it selects the deterministic attention backward (slower: dQ in a kernel of its own instead of atomic adds) and GEMM algorithms chosen without timing (as train.gemmAutotune 0). The CPU and WebGPU backends give the same bits on every run either way.'),
  gemmAutotune: int(0).max(64).default(8).describe("CUDA: cuBLASLt candidate algorithms timed on each GEMM shape's first call, the fastest kept (0: the heuristic's first choice). Timing can pick another algorithm on another run, with other last bits; train.deterministic uses 0 whatever this says."),
  precision: z.enum(PRECISIONS).default('auto').describe('Compute dtype of activations and of the weights\' working copy: bf16 (mixed precision), fp16 (f16, with dynamic loss scaling: train.fp16) or f32. Master weights, gradients and AdamW state are f32 either way. auto: bf16 on cuda, f32 on cpu and webgpu. fp16 runs on the cpu backend only (the CUDA and WebGPU kernels take no f16). fp8: as auto, and the decoder blocks\' linear layers (q/k/v, output, gate/up, down) run their GEMMs on FP8 operands, forward and backward (E4M3 activations and weights, E5M2 output gradients; train.fp8 says how they are scaled and which blocks keep the compute dtype): FP8 tensor cores on CUDA (sm 8.9 and newer), emulated (quantised operands, f32 GEMMs) on cpu and webgpu.'),
  fp8: z.strictObject({
    scaling: z.enum(FP8_SCALING_RECIPES).default('delayed').describe('How each FP8 tensor\'s power-of-two scale is chosen. delayed: from the largest amax of the tensor\'s last historyLen steps (Transformer Engine\'s delayed scaling; the first step scales as current does). current: from the tensor\'s own amax, computed before it is quantised (one more pass over it). blockwise: a scale per block from the block\'s own amax, 1x128 for activations and gradients, 128x128 for weights (the DeepSeek-V3 recipe; on CUDA cuBLASLt\'s block-scaled FP8 GEMM, sm 9.0 with cuBLASLt 12.9 or newer, else a plain kernel).'),
    historyLen: int(1).max(1024).default(16).describe('delayed: steps of amax history each scale is chosen from.'),
    margin: int(0).max(32).default(0).describe('Scales are divided by 2^margin: headroom for values larger than the amax the scale was chosen from.'),
    keepFirst: int(0).default(0).describe('The first this many decoder blocks keep the compute dtype (bf16) for their GEMMs.'),
    keepLast: int(0).default(0).describe('The last this many decoder blocks keep the compute dtype (bf16) for their GEMMs.'),
  }).prefault({}).describe('FP8 training (train.precision fp8): the scaling recipe and which blocks run in FP8.'),
  fp16: z.strictObject({
    initialScale: z.number().min(1).max(2 ** 64).refine((v) => Number.isInteger(Math.log2(v)), 'expected a power of two').default(65536).describe('The loss scale S a run starts from, a power of two (so dividing by it is exact): the loss gradient is multiplied by S, so the f16 gradients keep the small values they would lose to underflow, and the f32 gradients are divided by S again (in the gradient norm) before clipping and AdamW. A step whose gradients overflow (a non-finite norm) is skipped and halves S; growthInterval good steps in a row double it.'),
    growthInterval: int(1).default(2000).describe('The loss scale doubles after this many steps in a row without an overflow.'),
  }).prefault({}).describe('FP16 training (train.precision fp16): dynamic loss scaling.'),
  recompute: z.enum(RECOMPUTE).default('none').describe('Activations recomputed in the backward pass instead of kept from the forward: none, swiglu (each MLP\'s silu(gate)·up product, [tokens, ffnHidden] a layer: a third of the MLP\'s saved activations, for one elementwise kernel a layer), or full (every decoder block\'s activations: the blocks keep only their inputs, [tokens, dModel] a layer, share one set of activation buffers, and each block\'s forward runs again just before its backward: about a third more compute, for the activations of one block instead of all; not with train.precision fp8). The gradients are the same bits either way.'),
  zero: int(0).max(1).default(0).describe('Sharding of the optimizer over the data-parallel ranks (ZeRO). 0: every rank keeps the whole AdamW state and the gradients are all-reduced. 1: each rank keeps the AdamW moments of its shard of the flat parameter buffer only (a range: 1/ranks of it), the gradients are reduce-scattered, each rank updates its shard and the updated f32 weights are all-gathered (the f32 weights themselves stay whole on every rank). The losses are those of zero 0 (the same bits unless the gradient norm crosses train.gradClip: the norm is summed over the shards). One process: the same as 0.'),
  logitChunks: int(1).default(1).describe('The LM head and the loss run over this many blocks of the batch\'s tokens in turn, so only one block\'s logits ([tokens / logitChunks, vocabSize]) are held at a time instead of all of them. Each block beyond the first adds one read and write of the head\'s f32 weight gradient ([vocabSize, dModel]). The losses are the same bits either way; the head\'s weight gradient is summed block by block, equal up to f32 rounding. Packed loss rows (train.lossRows) run in at least 8 blocks, so that those past the last packed row can be skipped.'),
  lossRows: z.enum(LOSS_ROWS).default('weighted').describe('The rows the LM head and the loss run over in training. weighted: under masked diffusion on the CPU, on WebGPU, or on CUDA with graphs (train.cudaGraphs), only the rows that carry a loss (the masked tokens, about half), packed to the front, in logit blocks (train.logitChunks, at least 8 here) of which those past the last such row are skipped; on CUDA without graphs every row, as packing could skip nothing there. all: every row, as autoregressive training always does. The loss is the same either way; the gradients equal up to f32 rounding.'),
});

export const SftSchema = z.strictObject({
  pack: z.boolean().optional().describe('Chat data: several whole conversations a row, each its own attention document (true), or one a row (false). A conversation longer than model.seqLen keeps its first model.seqLen tokens. Default: true for ar, false for mdlm (LLaDA).'),
  padding: z.enum(SFT_PADDING).optional().describe("Chat data: what fills a row after its last conversation. eos: EOS tokens that continue that conversation's reply and are in the loss (under mdlm masked like the reply, so the model learns where a reply ends: LLaDA); none: padding outside attention and the loss. Default: eos for mdlm, none for ar."),
});

type Issue = { path: (string | number)[]; message: string };

/** The raw (input) schema: strict objects with defaults, before derived defaults and cross-field checks. */
export const RawConfigSchema = z.strictObject({
  model: ModelSchema.prefault({}).describe('Model architecture (Llama-style: RMSNorm, RoPE, SwiGLU, GQA).'),
  objective: ObjectiveSchema.prefault({}).describe('Training objective and its noise process.'),
  data: DataSchema.prefault({}).describe('Training data and tokenizer.'),
  train: TrainSchema.prefault({}).describe('Optimisation, schedule, evaluation and checkpointing.'),
  sft: SftSchema.prefault({}).describe('Supervised fine-tuning on chat data (data.format chat): how conversations fill the rows.'),
  backend: z.enum(BACKENDS).default('auto').describe('Compute backend: auto (probe: cuda, then a GPU WebGPU adapter, then cpu; a software adapter such as lavapipe is passed over for the cpu), cpu, webgpu or cuda.'),
  out: z.string().min(1).default('runs/mdlm').describe('Output directory for checkpoints and logs.'),
});

type Raw = z.output<typeof RawConfigSchema>;

export function defaultFfnHidden(dModel: number): number {
  return Math.ceil((8 * dModel) / 3 / 64) * 64;
}

/** Derived defaults, then every check that involves more than one field. `tokenizer`: the data's, where known beyond data.tokenizer. */
function finish(raw: Raw, issues: Issue[], tokenizer: TokenizerShape | undefined) {
  const tok = tokenizer ?? builtinTokenizer(raw.data.tokenizer);
  const needs = tok && vocabularyNeeds(tok, raw.objective.kind, raw.objective.maskTokenId);
  let vocabSize = raw.model.vocabSize ?? (needs && paddedVocabSize(needs.ids));
  if (vocabSize === undefined) {
    issues.push({ path: ['model', 'vocabSize'], message: `the size of the tokenizer ${JSON.stringify(raw.data.tokenizer)} is known once it is loaded (as mdlm train does); set model.vocabSize` });
    vocabSize = 2;
  }
  const model = {
    ...raw.model,
    vocabSize,
    nKvHeads: raw.model.nKvHeads ?? raw.model.nHeads,
    ffnHidden: raw.model.ffnHidden ?? defaultFfnHidden(raw.model.dModel),
  };
  const objective = {
    ...raw.objective,
    maskTokenId: raw.objective.maskTokenId ?? needs?.maskId ?? vocabSize - 1,
  };
  const sft = { pack: raw.sft.pack ?? raw.objective.kind === 'ar', padding: raw.sft.padding ?? (raw.objective.kind === 'mdlm' ? 'eos' : 'none') };
  const cfg = { ...raw, model, objective, sft };

  const m = model;
  if (m.dModel % m.nHeads !== 0) {
    issues.push({ path: ['model', 'nHeads'], message: `model.nHeads (${m.nHeads}) must divide model.dModel (${m.dModel}); try ${divisorsNear(m.dModel, m.nHeads)}` });
  } else {
    const headDim = m.dModel / m.nHeads;
    if (headDim % 2 !== 0) issues.push({ path: ['model', 'nHeads'], message: `head dimension model.dModel / model.nHeads = ${headDim} must be even for RoPE; change model.nHeads or model.dModel` });
  }
  if (m.qkvBias && m.qkNorm) {
    issues.push({ path: ['model', 'qkNorm'], message: 'model.qkvBias and model.qkNorm together have no Hugging Face architecture to save as (Qwen2 has q/k/v biases, Qwen3 has q/k norms); turn one off' });
  }
  if (m.nHeads % m.nKvHeads !== 0) {
    issues.push({ path: ['model', 'nKvHeads'], message: `model.nKvHeads (${m.nKvHeads}) must divide model.nHeads (${m.nHeads}); try ${divisorsNear(m.nHeads, m.nKvHeads)}` });
  }
  if (tok && needs && raw.model.vocabSize !== undefined && m.vocabSize < needs.ids) {
    const mask = needs.maskAdded ? ` (its ${tok.vocabSize} and the [MASK] of masked diffusion, id ${needs.maskId})` : '';
    issues.push({ path: ['model', 'vocabSize'], message: `model.vocabSize (${m.vocabSize}) is too small for the ${tok.name} tokenizer: it needs at least ${needs.ids} ids${mask}; leave model.vocabSize unset to follow the tokenizer` });
  }
  const explicitMask = raw.objective.kind === 'mdlm' ? raw.objective.maskTokenId : undefined;
  if (objective.maskTokenId >= m.vocabSize) {
    issues.push({ path: ['objective', 'maskTokenId'], message: `objective.maskTokenId (${objective.maskTokenId}) must be < model.vocabSize (${m.vocabSize})` });
  } else if (tok && explicitMask !== undefined && explicitMask < tok.vocabSize && explicitMask !== tok.maskId) {
    issues.push({ path: ['objective', 'maskTokenId'], message: `objective.maskTokenId (${explicitMask}) is a real token of the ${tok.name} tokenizer (ids 0..${tok.vocabSize - 1}${tok.maskId !== undefined ? `, its [MASK] ${tok.maskId}` : ''}); leave it unset to use the tokenizer's [MASK]` });
  }
  const o = raw.objective;
  if (o.tMin >= o.tMax) issues.push({ path: ['objective', 'tMin'], message: `objective.tMin (${o.tMin}) must be < objective.tMax (${o.tMax})` });
  if (o.kind === 'mdlm' && o.weighting === 'elbo' && o.tMin === 0) {
    issues.push({ path: ['objective', 'tMin'], message: 'objective.tMin = 0 makes the ELBO weight 1/t infinite; use a small ε such as 1e-3 (or objective.weighting empirical)' });
  }
  const t = raw.train;
  if (t.precision === 'fp8' && t.fp8.keepFirst + t.fp8.keepLast >= m.nLayers) {
    issues.push({ path: ['train', 'fp8', 'keepFirst'], message: `train.fp8.keepFirst (${t.fp8.keepFirst}) plus keepLast (${t.fp8.keepLast}) leave none of the ${m.nLayers} blocks in FP8; lower them, or use train.precision bf16` });
  }
  if (t.minLr > t.lr) issues.push({ path: ['train', 'minLr'], message: `train.minLr (${t.minLr}) must be <= train.lr (${t.lr})` });
  if (t.warmupSteps > t.steps) issues.push({ path: ['train', 'warmupSteps'], message: `train.warmupSteps (${t.warmupSteps}) must be <= train.steps (${t.steps})` });
  if (t.decay === 'wsd' && t.warmupSteps + Math.round(t.wsdDecayFraction * t.steps) > t.steps) {
    issues.push({ path: ['train', 'wsdDecayFraction'], message: `warmup (${t.warmupSteps}) plus the wsd decay (${t.wsdDecayFraction} × ${t.steps} steps) exceed train.steps (${t.steps})` });
  }
  return cfg;
}

function divisorsNear(n: number, near: number): string {
  const ds: number[] = [];
  for (let d = 1; d <= n; d++) if (n % d === 0) ds.push(d);
  ds.sort((a, b) => Math.abs(a - near) - Math.abs(b - near));
  return `one of ${ds.slice(0, 3).sort((a, b) => a - b).join(', ')}`;
}

/**
 * The full schema: raw schema, derived defaults and cross-field checks, with the data's
 * tokenizer where it is known beyond the built-in one data.tokenizer names.
 */
export function trainConfigSchema(tokenizer?: TokenizerShape) {
  return RawConfigSchema.transform((raw, ctx) => {
    const issues: Issue[] = [];
    const cfg = finish(raw, issues, tokenizer);
    for (const i of issues) ctx.issues.push({ code: 'custom', message: i.message, path: i.path, input: undefined });
    return cfg;
  });
}

export const TrainConfigSchema = trainConfigSchema();

export type TrainConfig = z.output<typeof TrainConfigSchema>;
export type TrainConfigInput = z.input<typeof RawConfigSchema>;
export type ModelConfig = TrainConfig['model'];
export type ObjectiveConfig = TrainConfig['objective'];
/** The objective section as parsed on its own (maskTokenId not yet derived). */
export type ObjectiveSection = z.output<typeof ObjectiveSchema>;
export type DataConfig = TrainConfig['data'];
export type TrainSection = TrainConfig['train'];
export type SftConfig = TrainConfig['sft'];
