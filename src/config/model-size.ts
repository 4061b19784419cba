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
import type { ModelConfig, ObjectiveConfig } from './schema.js';

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
