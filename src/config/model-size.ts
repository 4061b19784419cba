/**
 * Parameter and FLOP counts for the Llama-style model (RMSNorm, RoPE, SwiGLU, GQA).
 *
 * FLOP convention (training = forward + backward, multiply-add = 2 FLOPs):
 *   flops/token = 6·N_matmul + attention
 *   N_matmul   = every weight that takes part in a matmul: q/k/v/o, gate/up/down of every layer
 *                and the output projection V·d (counted once even when tied to the embedding; the
 *                embedding lookup itself is free). Norm gains and biases are not counted.
 *   attention  = 12·L·(nHeads·headDim)·T for bidirectional attention (mdlm): QKᵀ and A·V are each
 *                2·T·d_attn FLOPs per token forward, ×3 for forward + backward (PaLM, appendix B).
 *                For causal attention (ar) only the lower triangle is work, so the default halves
 *                it to 6·L·d_attn·T — what a causal flash kernel actually computes. Pass
 *                { causalAttention: 'full' } for the PaLM / nanoGPT convention that does not halve
 *                (their published MFU figures use it), so an ar MFU here is not inflated by work
 *                that is skipped.
 */
import type { ModelConfig, ObjectiveConfig, Recompute } from './schema.js';

export interface ParamBreakdown {
  total: number;
  embedding: number;
  /** lm_head when untied, 0 when tied. */
  lmHead: number;
  /** Everything in the transformer blocks plus the final norm. */
  blocks: number;
  /** Parameters that take part in matmuls (for FLOPs): block linears + the output projection. */
  matmul: number;
}

export function headDim(m: Pick<ModelConfig, 'dModel' | 'nHeads'>): number {
  return m.dModel / m.nHeads;
}

export function paramBreakdown(m: ModelConfig): ParamBreakdown {
  const d = m.dModel;
  const hd = headDim(m);
  const qDim = m.nHeads * hd;
  const kvDim = m.nKvHeads * hd;
  const attnLinears = d * qDim + 2 * d * kvDim + qDim * d;
  const mlpLinears = 3 * d * m.ffnHidden;
  const perLayer = attnLinears + mlpLinears + 2 * d + (m.qkNorm ? 2 * hd : 0) + (m.qkvBias ? qDim + 2 * kvDim : 0);
  const blocks = m.nLayers * perLayer + d;
  const embedding = m.vocabSize * d;
  const lmHead = m.tieEmbeddings ? 0 : m.vocabSize * d;
  return {
    total: embedding + lmHead + blocks,
    embedding,
    lmHead,
    blocks,
    matmul: m.nLayers * (attnLinears + mlpLinears) + m.vocabSize * d,
  };
}

export function paramCount(m: ModelConfig): number {
  return paramBreakdown(m).total;
}

export interface FlopsOptions {
  /** 'half' (default): causal attention counts the lower triangle only. 'full': PaLM convention. */
  causalAttention?: 'half' | 'full';
}

export interface FlopsBreakdown {
  total: number;
  dense: number;
  attention: number;
  convention: string;
}

export function flopsBreakdown(m: ModelConfig, seqLen: number, objective: Pick<ObjectiveConfig, 'kind'> | 'ar' | 'mdlm', opts: FlopsOptions = {}): FlopsBreakdown {
  const kind = typeof objective === 'string' ? objective : objective.kind;
  const dense = 6 * paramBreakdown(m).matmul;
  const full = 12 * m.nLayers * m.nHeads * headDim(m) * seqLen;
  const halve = kind === 'ar' && (opts.causalAttention ?? 'half') === 'half';
  const attention = halve ? full / 2 : full;
  const convention = kind === 'mdlm'
    ? '6·N + 12·L·d·T (bidirectional attention)'
    : halve ? '6·N + 6·L·d·T (causal attention, lower triangle only)' : '6·N + 12·L·d·T (causal attention counted in full, PaLM convention)';
  return { total: dense + attention, dense, attention, convention };
}

/** Training FLOPs per token (forward + backward); see the convention at the top of this file. */
export function flopsPerToken(m: ModelConfig, seqLen: number, objective: Pick<ObjectiveConfig, 'kind'> | 'ar' | 'mdlm', opts: FlopsOptions = {}): number {
  return flopsBreakdown(m, seqLen, objective, opts).total;
}

/** Element counts of every parameter tensor, in no particular order (what ParamStore declares). */
export function paramSizes(m: ModelConfig): number[] {
  const d = m.dModel;
  const hd = headDim(m);
  const qDim = m.nHeads * hd;
  const kvDim = m.nKvHeads * hd;
  const layer = [
    d, qDim * d, kvDim * d, kvDim * d, d * qDim, // attn_norm, q, k, v, o
    ...(m.qkvBias ? [qDim, kvDim, kvDim] : []),
    ...(m.qkNorm ? [hd, hd] : []),
    d, m.ffnHidden * d, m.ffnHidden * d, d * m.ffnHidden, // mlp_norm, gate, up, down
  ];
  return [m.vocabSize * d, ...Array.from({ length: m.nLayers }, () => layer).flat(), d, ...(m.tieEmbeddings ? [] : [m.vocabSize * d])];
}

/** Parameters start on 64-element boundaries in the flat buffers (WebGPU binding alignment). */
export const PARAM_ALIGN = 64;

/**
 * Whether the store lays a SwiGLU MLP's gate and up weights back to back, so one GEMM serves both
 * (src/nn/mlp.ts, `joined`): declared in that order, they are unless the gate's hidden · dModel
 * elements need padding to PARAM_ALIGN.
 */
export function gateUpJoined(dModel: number, hidden: number): boolean {
  return (dModel * hidden) % PARAM_ALIGN === 0;
}

/** Elements of each flat parameter buffer: every tensor padded to PARAM_ALIGN. */
export function flatParamElements(m: ModelConfig): number {
  return Math.max(PARAM_ALIGN, paramSizes(m).reduce((n, s) => n + Math.ceil(s / PARAM_ALIGN) * PARAM_ALIGN, 0));
}

/** What a training model trades compute for memory with (train.recompute, train.logitChunks), and whether it packs the loss rows (train.lossRows). */
export interface ActivationSaving {
  readonly recompute?: Recompute;
  readonly logitChunks?: number;
  readonly packLossRows?: boolean;
}

/** The fewest blocks packed loss rows run in: the blocks past the last packed row are skipped. */
export const PACKED_LOGIT_CHUNKS = 8;

/**
 * The blocks the LM head and the loss run over: train.logitChunks, and with packed loss rows at
 * least PACKED_LOGIT_CHUNKS (on an H200, 8 blocks were 0.2 ms a step faster than 4 at llama-124m
 * and level at 1.3B: bench/RESULTS.md).
 */
export function logitChunksOf(saving: ActivationSaving): number {
  const chunks = saving.logitChunks ?? 1;
  return saving.packLossRows ? Math.max(chunks, PACKED_LOGIT_CHUNKS) : chunks;
}

/**
 * Rows of logits a model holds at once when the LM head and the loss run over `chunks` blocks of
 * its `tokens` rows in turn: all of them for one block, else ⌈tokens / chunks⌉ rounded up to 64 (so
 * each block's views of the per-token buffers start on a 256-byte boundary, as WebGPU binds them;
 * hence at most `chunks` blocks, fewer on a short batch).
 */
export function logitRows(tokens: number, chunks: number): number {
  return chunks <= 1 ? tokens : Math.min(tokens, Math.ceil(tokens / chunks / 64) * 64);
}

export interface MemoryBreakdown {
  /** f32 master weights, their f32 gradients, AdamW's two f32 moments (flat, padded). */
  readonly weights: number;
  readonly grads: number;
  readonly optimizer: number;
  /** The working copy in the compute dtype (none under f32: the masters are read directly). */
  readonly workingCopy: number;
  /** Activations, saved tensors and backward scratch: the model's arena. */
  readonly activations: number;
  readonly total: number;
}

/**
 * Bytes a training model holds on its device at `batch` sequences of m.seqLen: the arithmetic of
 * src/model/llama.ts's allocations (tests hold the two together exactly). The backend's pool
 * rounds each buffer up to 256 bytes, and kernels keep some scratch of their own (CUDA: the
 * arena and cuBLASLt's 32 MiB workspace), so the device needs a little more.
 */
export function trainingMemory(m: ModelConfig, batch: number, dtype: 'f32' | 'bf16', saving: ActivationSaving = {}): MemoryBreakdown {
  const { recompute = 'none', packLossRows = false } = saving;
  const logitChunks = logitChunksOf(saving);
  const f = dtype === 'bf16' ? 2 : 4; // bytes of an activation
  const N = batch * m.seqLen;
  const d = m.dModel;
  const hd = headDim(m);
  const q = N * m.nHeads * hd;
  const kv = N * m.nKvHeads * hd;
  const F = m.ffnHidden;
  // Shared scratch: the block's two [N, d] (its norms' input gradients), attention's q/k/v projection and its gradient (one
  // buffer) and the output's gradient (+ ones for biases; zeros and a norm's input gradient for
  // q/k norms), the MLP's [2N, F] gate and up gradients and, where gate and up are not joined,
  // its [N, F] dh.
  const scratch = f * (2 * N * d + (q + 2 * kv + q) + (m.qkvBias ? N : 0) + (m.qkNorm ? 2 * q : 0) + (gateUpJoined(d, F) ? 2 : 3) * N * F);
  // Per layer: n1, mid, n2 and their two rstd; q/k before their norms and the norms' rstd; saved
  // q, k, v, out and lse; the MLP's gate, up and (unless recomputed) product.
  const perLayer =
    f * 3 * N * d + 4 * 2 * N +
    (m.qkNorm ? f * (q + kv) + 4 * N * (m.nHeads + m.nKvHeads) : 0) +
    f * (q + 2 * kv + q) + 4 * batch * m.nHeads * m.seqLen +
    f * (recompute === 'swiglu' ? 2 : 3) * N * F;
  // The model: ids, targets, segment ids, positions (i32), loss weights, rstd, per-token loss,
  // lse, loss gradient (f32), the loss sum; the residual streams, the final norm's output, the
  // logits of one block of rows (their gradient overwrites them), the stream gradients and the
  // zero residual gradient; packing the loss rows adds their order, slots, count, targets and
  // weights (its [N, d] buffers are dNormed and the stream gradient).
  const model = 4 * 4 * N + 4 * 5 * N + 4 + (packLossRows ? 4 * 4 * N + 4 : 0) + f * ((m.nLayers + 1) * N * d + N * d + logitRows(N, logitChunks) * m.vocabSize + 3 * N * d);
  const flat = flatParamElements(m);
  const weights = 4 * flat;
  const workingCopy = dtype === 'f32' ? 0 : f * flat;
  const activations = scratch + m.nLayers * perLayer + model;
  return { weights, grads: weights, optimizer: 2 * weights, workingCopy, activations, total: 4 * weights + workingCopy + activations };
}
