/**
 * LLaDA checkpoints (ML-GSAI/LLaDA, an OLMo-derived masked-diffusion model): their tensor names and
 * config.json. The model is a bidirectional Llama decoder (block_type llama: RMSNorm, SwiGLU,
 * RoPE with rotate_half), so its weights are mdlm's under other names:
 *
 *   mdlm name                  LLaDA name (under model.transformer.)
 *   embed                      wte.weight                     [embedding_size, d]
 *   layers.{i}.attn_norm       blocks.{i}.attn_norm.weight
 *   layers.{i}.attn.wq|wk|wv   blocks.{i}.{q,k,v}_proj.weight
 *   layers.{i}.attn.bq|bk|bv   blocks.{i}.{q,k,v}_proj.bias   (include_qkv_bias: model.qkvBias)
 *   layers.{i}.attn.wo         blocks.{i}.attn_out.weight
 *   layers.{i}.mlp_norm        blocks.{i}.ff_norm.weight
 *   layers.{i}.mlp.w_gate      blocks.{i}.ff_proj.weight      (act(ff_proj(x)) · up_proj(x))
 *   layers.{i}.mlp.w_up        blocks.{i}.up_proj.weight
 *   layers.{i}.mlp.w_down      blocks.{i}.ff_out.weight
 *   final_norm                 ln_f.weight
 *   lm_head                    ff_out.weight                  (weight_tying false)
 *
 * Reading a LLaDA config.json translates it to the Llama fields src/checkpoint/hf.ts reads, with an
 * `mdlm` section that makes the model masked diffusion with LLaDA's mask token id; writing one
 * gives the fields LLaDA's LLaDAConfig reads. This module imports nothing from hf.ts (which imports it).
 */
import { fail } from '../errors.js';

export const LLADA_MODEL_TYPE = 'llada';
export const LLADA_ARCHITECTURE = 'LLaDAModelLM';
/** Every LLaDA tensor name starts with this. */
export const LLADA_PREFIX = 'model.transformer.';
/** The mask token id of the released LLaDA models (<|mdm_mask|>), when a config.json does not give one. */
export const LLADA_MASK_TOKEN_ID = 126336;

const BLOCK_NAMES: Readonly<Record<string, string>> = {
  attn_norm: 'attn_norm.weight',
  'attn.wq': 'q_proj.weight', 'attn.wk': 'k_proj.weight', 'attn.wv': 'v_proj.weight',
  'attn.bq': 'q_proj.bias', 'attn.bk': 'k_proj.bias', 'attn.bv': 'v_proj.bias',
  'attn.wo': 'attn_out.weight',
  mlp_norm: 'ff_norm.weight',
  'mlp.w_gate': 'ff_proj.weight', 'mlp.w_up': 'up_proj.weight', 'mlp.w_down': 'ff_out.weight',
};
const TOP_NAMES: Readonly<Record<string, string>> = { embed: 'wte.weight', final_norm: 'ln_f.weight', lm_head: 'ff_out.weight' };

/** The LLaDA name of an mdlm parameter. */
export function lladaName(mdlmName: string): string {
  const top = TOP_NAMES[mdlmName];
  if (top) return LLADA_PREFIX + top;
  const m = /^layers\.(\d+)\.(.+)$/.exec(mdlmName);
  const inner = m ? BLOCK_NAMES[m[2]!] : undefined;
  if (!m || !inner) return fail('BAD_ARGUMENT', `parameter '${mdlmName}' has no LLaDA name (q/k norms are not in LLaDA's llama block)`);
  return `${LLADA_PREFIX}blocks.${m[1]}.${inner}`;
}

/** Whether tensor names are LLaDA's. */
export function hasLladaNames(names: readonly string[]): boolean {
  return names.some((n) => n.startsWith(LLADA_PREFIX));
}

/**
 * A LLaDA config.json as the Llama config.json of the same decoder, with an `mdlm` section
 * (objective mdlm, the mask token id, bidirectional; the LLaDA file's own `mdlm` section where it
 * has one, as mdlm writes it). Settings of LLaDA's that the decoder has no equivalent of are refused.
 */
export function lladaToLlamaConfig(c: Record<string, unknown>, source: string): Record<string, unknown> {
  const bad = (msg: string): never => fail('BAD_FILE', `${source}: LLaDA config: ${msg}`);
  const want = (key: string, expected: unknown, dflt: unknown, why: string): void => {
    const v = c[key] ?? dflt;
    if (v !== expected) bad(`${key} ${JSON.stringify(v)} is not supported (${why}); mdlm reads ${key} ${JSON.stringify(expected)}`);
  };
  want('block_type', 'llama', 'sequential', "mdlm's block is LLaDA's llama block");
  want('activation_type', 'silu', 'silu', 'the MLP is SwiGLU');
  want('layer_norm_type', 'rms', 'default', 'the norms are RMSNorm');
  want('layer_norm_with_affine', true, true, 'the norms have weights');
  want('alibi', false, false, 'positions are RoPE');
  want('rope', true, false, 'positions are RoPE');
  want('include_bias', false, true, 'no linear layer but q/k/v has a bias');
  want('attention_layer_norm', false, false, 'no norm over the whole q/k');
  want('input_emb_norm', false, false, 'no norm on the embeddings');
  for (const key of ['scale_logits', 'multi_query_attention']) {
    if (c[key] !== undefined && c[key] !== null && c[key] !== false) bad(`${key} ${JSON.stringify(c[key])} is not supported`);
  }
  if (c.rope_scaling !== undefined && c.rope_scaling !== null) bad(`rope_scaling ${JSON.stringify(c.rope_scaling)} is not supported; mdlm implements plain RoPE`);
  const vocab = c.embedding_size ?? c.vocab_size;
  const mask = c.mask_token_id ?? LLADA_MASK_TOKEN_ID;
  if (typeof mask !== 'number' || !Number.isInteger(mask) || mask < 0 || (typeof vocab === 'number' && mask >= vocab)) {
    bad(`mask_token_id ${JSON.stringify(c.mask_token_id)}${c.mask_token_id === undefined ? ` (LLaDA's ${LLADA_MASK_TOKEN_ID}, the file giving none)` : ''} must be an id below the vocabulary of ${JSON.stringify(vocab)}`);
  }
  const own = c.mdlm as Record<string, unknown> | undefined;
  return {
    model_type: 'llama',
    hidden_size: c.d_model,
    num_attention_heads: c.n_heads,
    num_key_value_heads: c.n_kv_heads ?? c.n_heads,
    num_hidden_layers: c.n_layers,
    // LLaDA's llama block: hidden size mlp_hidden_size, else mlp_ratio · d_model.
    intermediate_size: c.mlp_hidden_size ?? (typeof c.mlp_ratio === 'number' && typeof c.d_model === 'number' ? c.mlp_ratio * c.d_model : undefined),
    vocab_size: vocab,
    max_position_embeddings: c.max_sequence_length,
    rms_norm_eps: c.rms_norm_eps ?? 1e-5,
    rope_theta: c.rope_theta ?? 10000,
    tie_word_embeddings: c.weight_tying ?? true,
    initializer_range: c.init_std ?? 0.02,
    bos_token_id: c.bos_token_id ?? null,
    eos_token_id: c.eos_token_id ?? null,
    torch_dtype: c.torch_dtype,
    ...(c.include_qkv_bias === true ? { model_type: 'qwen2' } : {}),
    mdlm: own ?? { version: 1, objective: 'mdlm', mask_token_id: mask, bidirectional: true },
  };
}

export interface LladaConfigOptions {
  readonly maskTokenId: number;
  readonly torchDtype: string;
  readonly bosTokenId: number | null;
  readonly eosTokenId: number | null;
  /** mdlm's own section (the run's config), kept so that mdlm reads the file back as it wrote it. */
  readonly mdlm?: unknown;
}

/** The model fields of mdlm's model config, as the decoder they describe. */
export interface LladaModelFields {
  readonly vocabSize: number;
  readonly dModel: number;
  readonly nLayers: number;
  readonly nHeads: number;
  readonly nKvHeads: number;
  readonly ffnHidden: number;
  readonly seqLen: number;
  readonly ropeTheta: number;
  readonly normEps: number;
  readonly qkNorm: boolean;
  readonly qkvBias: boolean;
  readonly tieEmbeddings: boolean;
  readonly initStd: number;
}

/** A LLaDA config.json for an mdlm diffusion model (the fields LLaDA's LLaDAConfig reads). */
export function lladaConfigFromModel(m: LladaModelFields, o: LladaConfigOptions): Record<string, unknown> {
  if (m.qkNorm) fail('BAD_CONFIG', 'model.qkNorm has no LLaDA equivalent (its attention_layer_norm normalises the whole q/k, not each head); export this model as hf');
  return {
    architectures: [LLADA_ARCHITECTURE],
    model_type: LLADA_MODEL_TYPE,
    block_type: 'llama',
    activation_type: 'silu',
    layer_norm_type: 'rms',
    layer_norm_with_affine: true,
    bias_for_layer_norm: false,
    attention_layer_norm: false,
    attention_layer_norm_with_affine: true,
    alibi: false,
    rope: true,
    rope_full_precision: true,
    rope_theta: m.ropeTheta,
    include_bias: false,
    include_qkv_bias: m.qkvBias,
    input_emb_norm: false,
    scale_logits: false,
    d_model: m.dModel,
    n_heads: m.nHeads,
    n_kv_heads: m.nKvHeads,
    n_layers: m.nLayers,
    mlp_hidden_size: m.ffnHidden,
    mlp_ratio: m.ffnHidden / m.dModel,
    vocab_size: m.vocabSize,
    embedding_size: m.vocabSize,
    max_sequence_length: m.seqLen,
    rms_norm_eps: m.normEps,
    weight_tying: m.tieEmbeddings,
    init_std: m.initStd,
    mask_token_id: o.maskTokenId,
    bos_token_id: o.bosTokenId,
    eos_token_id: o.eosTokenId,
    pad_token_id: o.eosTokenId,
    attention_dropout: 0,
    residual_dropout: 0,
    embedding_dropout: 0,
    use_cache: false,
    torch_dtype: o.torchDtype,
    ...(o.mdlm !== undefined ? { mdlm: o.mdlm } : {}),
  };
}
