/**
 * mdlm parameters ⇄ Hugging Face Llama / Qwen2 names, and config.json.
 *
 * Layout contract with src/model: a linear weight is stored [out, in] (torch.nn.Linear, llm.c),
 * y = x·Wᵀ, so mdlm and HF shapes are identical and nothing is transposed on import/export.
 * RoPE must rotate dimension i with i + headDim/2 (HF `rotate_half`, GPT-NeoX style), not
 * interleaved pairs; otherwise q/k rows would need permuting.
 *
 *   mdlm name                  HF name                                          shape
 *   embed                      model.embed_tokens.weight                        [V, d]
 *   layers.{i}.attn_norm       model.layers.{i}.input_layernorm.weight          [d]
 *   layers.{i}.attn.wq         model.layers.{i}.self_attn.q_proj.weight         [H·hd, d]
 *   layers.{i}.attn.wk         model.layers.{i}.self_attn.k_proj.weight         [Hkv·hd, d]
 *   layers.{i}.attn.wv         model.layers.{i}.self_attn.v_proj.weight         [Hkv·hd, d]
 *   layers.{i}.attn.bq|bk|bv   model.layers.{i}.self_attn.{q,k,v}_proj.bias     (model.qkvBias; Qwen2)
 *   layers.{i}.attn.q_norm     model.layers.{i}.self_attn.q_norm.weight         [hd] (model.qkNorm; Qwen3)
 *   layers.{i}.attn.k_norm     model.layers.{i}.self_attn.k_norm.weight         [hd] (model.qkNorm; Qwen3)
 *   layers.{i}.attn.wo         model.layers.{i}.self_attn.o_proj.weight         [d, H·hd]
 *   layers.{i}.mlp_norm        model.layers.{i}.post_attention_layernorm.weight [d]
 *   layers.{i}.mlp.w_gate      model.layers.{i}.mlp.gate_proj.weight            [F, d]
 *   layers.{i}.mlp.w_up        model.layers.{i}.mlp.up_proj.weight              [F, d]
 *   layers.{i}.mlp.w_down      model.layers.{i}.mlp.down_proj.weight            [d, F]
 *   final_norm                 model.norm.weight                                [d]
 *   lm_head                    lm_head.weight                                   [V, d] (untied only)
 *
 * LLaDA checkpoints name the same tensors otherwise (src/checkpoint/llada.ts): paramSpecs gives
 * either naming, and fromHfTensors reads whichever a checkpoint has.
 */
import { fail } from '../errors.js';
import { defaultFfnHidden, ModelSchema, type ModelConfig, type ObjectiveConfig, type TrainConfig } from '../config/schema.js';
import { parseConfig } from '../config/load.js';
import type { LoadedTensor, TensorMap, TensorSource, WritableDType } from './safetensors.js';
import { toFloat32 } from './safetensors.js';
import { LLADA_MODEL_TYPE, hasLladaNames, lladaName, lladaToLlamaConfig } from './llada.js';

/** How a checkpoint names its tensors: Hugging Face Llama / Qwen (hf) or LLaDA's. */
export type TensorNaming = 'hf' | 'llada';

export type ParamKind = 'embedding' | 'linear' | 'norm' | 'bias';

export interface ParamSpec {
  /** mdlm name. */
  name: string;
  /** The tensor's name in the checkpoint (Hugging Face, or LLaDA under that naming). */
  hf: string;
  /** Shape (identical in mdlm and HF: [out, in] for linears). */
  shape: number[];
  kind: ParamKind;
  /** Block index, or undefined for embedding / final norm / lm_head. */
  layer?: number;
}

/** Every parameter of the model, in a stable order (embedding, blocks, final norm, lm_head), named as `naming` names them. */
export function paramSpecs(m: ModelConfig, naming: TensorNaming = 'hf'): ParamSpec[] {
  const specs = hfParamSpecs(m);
  return naming === 'hf' ? specs : specs.map((s) => ({ ...s, hf: lladaName(s.name) }));
}

function hfParamSpecs(m: ModelConfig): ParamSpec[] {
  const d = m.dModel;
  const hd = d / m.nHeads;
  const q = m.nHeads * hd;
  const kv = m.nKvHeads * hd;
  const F = m.ffnHidden;
  const out: ParamSpec[] = [{ name: 'embed', hf: 'model.embed_tokens.weight', shape: [m.vocabSize, d], kind: 'embedding' }];
  for (let i = 0; i < m.nLayers; i++) {
    const L = `model.layers.${i}`;
    const p = (name: string, hf: string, shape: number[], kind: ParamKind) => out.push({ name: `layers.${i}.${name}`, hf: `${L}.${hf}`, shape, kind, layer: i });
    p('attn_norm', 'input_layernorm.weight', [d], 'norm');
    p('attn.wq', 'self_attn.q_proj.weight', [q, d], 'linear');
    p('attn.wk', 'self_attn.k_proj.weight', [kv, d], 'linear');
    p('attn.wv', 'self_attn.v_proj.weight', [kv, d], 'linear');
    if (m.qkvBias) {
      p('attn.bq', 'self_attn.q_proj.bias', [q], 'bias');
      p('attn.bk', 'self_attn.k_proj.bias', [kv], 'bias');
      p('attn.bv', 'self_attn.v_proj.bias', [kv], 'bias');
    }
    if (m.qkNorm) {
      p('attn.q_norm', 'self_attn.q_norm.weight', [hd], 'norm');
      p('attn.k_norm', 'self_attn.k_norm.weight', [hd], 'norm');
    }
    p('attn.wo', 'self_attn.o_proj.weight', [d, q], 'linear');
    p('mlp_norm', 'post_attention_layernorm.weight', [d], 'norm');
    p('mlp.w_gate', 'mlp.gate_proj.weight', [F, d], 'linear');
    p('mlp.w_up', 'mlp.up_proj.weight', [F, d], 'linear');
    p('mlp.w_down', 'mlp.down_proj.weight', [d, F], 'linear');
  }
  out.push({ name: 'final_norm', hf: 'model.norm.weight', shape: [d], kind: 'norm' });
  if (!m.tieEmbeddings) out.push({ name: 'lm_head', hf: 'lm_head.weight', shape: [m.vocabSize, d], kind: 'linear' });
  return out;
}

const numel = (s: readonly number[]) => s.reduce((a, b) => a * b, 1);
const shapeStr = (s: readonly number[]) => `[${s.join(', ')}]`;

function listSome(xs: string[], n = 6): string {
  return xs.length <= n ? xs.join(', ') : `${xs.slice(0, n).join(', ')} and ${xs.length - n} more`;
}

/** mdlm tensors (Float32Array by mdlm name) → safetensors entries by HF (or LLaDA) name. */
export function toHfTensors(m: ModelConfig, params: Record<string, Float32Array>, dtype: Exclude<WritableDType, 'I32'> = 'F32', naming: TensorNaming = 'hf'): TensorMap {
  const specs = paramSpecs(m, naming);
  const missing = specs.filter((s) => !(s.name in params)).map((s) => s.name);
  if (missing.length) fail('BAD_ARGUMENT', `toHfTensors: model parameters missing: ${listSome(missing)}`);
  const known = new Set(specs.map((s) => s.name));
  const extra = Object.keys(params).filter((k) => !known.has(k));
  if (extra.length) fail('BAD_ARGUMENT', `toHfTensors: parameters not in the model config: ${listSome(extra)} (does model.qkvBias / qkNorm / tieEmbeddings match the model?)`);
  const out: TensorMap = {};
  for (const s of specs) {
    const data = params[s.name]!;
    if (data.length !== numel(s.shape)) fail('BAD_ARGUMENT', `toHfTensors: '${s.name}' has ${data.length} values, expected ${shapeStr(s.shape)} = ${numel(s.shape)}`);
    out[s.hf] = { dtype, shape: s.shape, data };
  }
  return out;
}

/** Tensors that HF checkpoints may carry and that hold no parameters. */
const IGNORED = /(^|\.)rotary_emb\.inv_freq$|(^|\.)masked_bias$|(^|\.)attn\.bias$/;

/**
 * Read HF-named (or LLaDA-named) tensors into mdlm parameters (Float32Array by mdlm name), checking
 * that every parameter is there with its shape and that nothing is left over that the model cannot hold.
 */
export function fromHfTensors(m: ModelConfig, src: TensorSource | Record<string, LoadedTensor>, source: string): Record<string, Float32Array> {
  const isSource = typeof (src as TensorSource).names === 'function';
  const names = isSource ? (src as TensorSource).names() : Object.keys(src);
  const shapeOf = (n: string) => (isSource ? (src as TensorSource).info(n)!.shape : (src as Record<string, LoadedTensor>)[n]!.shape);
  const read = (n: string) => (isSource ? (src as TensorSource).readFloat32(n) : toFloat32((src as Record<string, LoadedTensor>)[n]!, n, source));
  const have = new Set(names);
  const specs = paramSpecs(m, hasLladaNames(names) ? 'llada' : 'hf');
  const expected = new Set(specs.map((s) => s.hf));
  const problems: string[] = [];

  const extra = names.filter((n) => !expected.has(n) && !IGNORED.test(n));
  const biases = extra.filter((n) => /self_attn\.[qkv]_proj\.bias$/.test(n));
  if (biases.length && !m.qkvBias) {
    problems.push(`it has q/k/v projection biases (Qwen2 style, e.g. ${biases[0]}) but the model has none; set model.qkvBias true to load them`);
  }
  const qkn = extra.filter((n) => /self_attn\.[qk]_norm\.weight$/.test(n));
  if (qkn.length && !m.qkNorm) problems.push(`it has per-head q/k norms (e.g. ${qkn[0]}) but model.qkNorm is false; set model.qkNorm true`);
  let lmHeadTied = false;
  if (have.has('lm_head.weight') && m.tieEmbeddings) {
    // Tied checkpoints sometimes store the shared matrix twice; accept only an exact copy.
    const a = read('lm_head.weight');
    const b = have.has('model.embed_tokens.weight') ? read('model.embed_tokens.weight') : undefined;
    lmHeadTied = b !== undefined && a.length === b.length && a.every((x, i) => Object.is(x, b[i]));
    if (!lmHeadTied) problems.push('it has a separate lm_head.weight but model.tieEmbeddings is true; set model.tieEmbeddings false to load it');
  }
  const unknown = extra.filter((n) => !biases.includes(n) && !qkn.includes(n) && !(n === 'lm_head.weight' && m.tieEmbeddings));
  if (unknown.length) problems.push(`it has tensors the mdlm model cannot hold: ${listSome(unknown)}`);

  const missing = specs.filter((s) => !have.has(s.hf));
  if (missing.length) {
    const hint = missing.some((s) => s.name === 'lm_head') ? ' (no lm_head.weight: the checkpoint ties embeddings; set model.tieEmbeddings true)' : '';
    problems.push(`it lacks ${missing.length} tensor(s) the model needs: ${listSome(missing.map((s) => `${s.hf} (mdlm ${s.name})`), 4)}${hint}`);
  }
  // One line however many tensors differ: a model config other than the checkpoint's misshapes most of them.
  const misshapen = specs.filter((s) => {
    if (!have.has(s.hf)) return false;
    const got = shapeOf(s.hf);
    return got.length !== s.shape.length || got.some((x, i) => x !== s.shape[i]);
  });
  if (misshapen.length) {
    const s = misshapen[0]!;
    const more = misshapen.length > 1 ? ` (and ${misshapen.length - 1} more tensor${misshapen.length > 2 ? 's' : ''} of other shapes)` : '';
    problems.push(`${s.hf} has shape ${shapeStr(shapeOf(s.hf))} but the model config needs ${shapeStr(s.shape)} (mdlm ${s.name})${more}`);
  }
  if (problems.length) fail('BAD_FILE', `${source} does not match the model config: ${problems.join('; ')}`);

  const out: Record<string, Float32Array> = {};
  for (const s of specs) out[s.name] = read(s.hf);
  return out;
}

// ---------------------------------------------------------------------------------------------
// config.json

export type TorchDType = 'float32' | 'bfloat16' | 'float16';

/** The Hugging Face model type of the decoder an mdlm model is. */
export type BaseModelType = 'llama' | 'qwen2' | 'qwen3';

/**
 * What mdlm adds to config.json: everything needed to rebuild the run, plus the [MASK] id.
 * A masked-diffusion checkpoint's own model_type is `mdlm` (transformers has no such model, so it
 * never runs one as a causal LM); `base_model_type` and `base_architecture` name the decoder its
 * weights fit, for mdlm and for users who load them into that class themselves.
 */
export interface MdlmSection {
  version: 1;
  objective: ObjectiveConfig['kind'];
  /** [MASK] token id (mdlm objective), null for ar. */
  mask_token_id: number | null;
  /** True for mdlm: the model uses bidirectional attention, unlike the HF architecture named. */
  bidirectional: boolean;
  /** The decoder the weights fit: Llama, Qwen2 (q/k/v biases) or Qwen3 (q/k norms). */
  base_model_type: BaseModelType;
  base_architecture: string;
  /** The resolved training config, when known. */
  config?: TrainConfig;
}

/** The architecture and model type a masked-diffusion checkpoint's config.json names. */
export const DIFFUSION_ARCHITECTURE = 'MdlmForMaskedDiffusion';
export const DIFFUSION_MODEL_TYPE = 'mdlm';

export interface HfConfigOptions {
  objective?: ObjectiveConfig;
  trainConfig?: TrainConfig;
  torchDtype?: TorchDType;
  bosTokenId?: number | null;
  eosTokenId?: number | null;
}

/** The HF architecture that can hold this model: Llama, Qwen2 (q/k/v biases) or Qwen3 (q/k norms). */
export function hfArchitecture(m: ModelConfig): { modelType: BaseModelType; architecture: string } {
  if (m.qkvBias && m.qkNorm) fail('BAD_CONFIG', 'model.qkvBias and model.qkNorm together have no Hugging Face architecture (Qwen2 has biases, Qwen3 has q/k norms); turn one off');
  if (m.qkvBias) return { modelType: 'qwen2', architecture: 'Qwen2ForCausalLM' };
  if (m.qkNorm) return { modelType: 'qwen3', architecture: 'Qwen3ForCausalLM' };
  return { modelType: 'llama', architecture: 'LlamaForCausalLM' };
}

export function hfConfigFromModel(m: ModelConfig, opts: HfConfigOptions = {}): Record<string, unknown> {
  const arch = hfArchitecture(m);
  const objective = opts.objective ?? opts.trainConfig?.objective;
  const kind = objective?.kind ?? 'ar';
  // A diffusion model is bidirectional: named so that transformers refuses it rather than running it causally.
  const cfg: Record<string, unknown> = {
    architectures: [kind === 'mdlm' ? DIFFUSION_ARCHITECTURE : arch.architecture],
    model_type: kind === 'mdlm' ? DIFFUSION_MODEL_TYPE : arch.modelType,
    hidden_size: m.dModel,
    intermediate_size: m.ffnHidden,
    num_attention_heads: m.nHeads,
    num_key_value_heads: m.nKvHeads,
    num_hidden_layers: m.nLayers,
    head_dim: m.dModel / m.nHeads,
    vocab_size: m.vocabSize,
    max_position_embeddings: m.seqLen,
    rms_norm_eps: m.normEps,
    // transformers 5 reads RoPE from rope_parameters; 4.x from rope_theta. Both agree.
    rope_theta: m.ropeTheta,
    rope_parameters: { rope_type: 'default', rope_theta: m.ropeTheta },
    hidden_act: 'silu',
    tie_word_embeddings: m.tieEmbeddings,
    initializer_range: m.initStd,
    attention_dropout: 0,
    // transformers 5 calls it dtype, 4.x torch_dtype.
    torch_dtype: opts.torchDtype ?? 'float32',
    dtype: opts.torchDtype ?? 'float32',
    bos_token_id: opts.bosTokenId ?? null,
    eos_token_id: opts.eosTokenId ?? null,
    use_cache: kind === 'ar',
  };
  if (arch.modelType === 'llama') Object.assign(cfg, { attention_bias: false, mlp_bias: false, pretraining_tp: 1 });
  if (arch.modelType !== 'llama') Object.assign(cfg, { use_sliding_window: false, sliding_window: null, max_window_layers: m.nLayers });
  if (arch.modelType === 'qwen3') cfg.attention_bias = false;
  const mdlm: MdlmSection = {
    version: 1,
    objective: kind,
    mask_token_id: kind === 'mdlm' ? (objective?.maskTokenId ?? m.vocabSize - 1) : null,
    bidirectional: kind === 'mdlm',
    base_model_type: arch.modelType,
    base_architecture: arch.architecture,
  };
  if (opts.trainConfig) mdlm.config = opts.trainConfig;
  cfg.mdlm = mdlm;
  return cfg;
}

export interface ModelFromHf {
  model: ModelConfig;
  /** The decoder: config.json's model_type, or a diffusion checkpoint's mdlm.base_model_type. */
  modelType: BaseModelType;
  torchDtype: string | undefined;
  bosTokenId: number | null;
  eosTokenId: number | null;
  /** The `mdlm` section when the checkpoint was written by mdlm (its config validated). */
  mdlm?: MdlmSection;
}

const isBaseModelType = (v: unknown): v is BaseModelType => v === 'llama' || v === 'qwen2' || v === 'qwen3';

/** Read a Llama / Qwen2 / Qwen3 config.json (already parsed), or an mdlm diffusion checkpoint's, into the mdlm model config. */
export function modelFromHfConfig(json: unknown, source = 'config.json'): ModelFromHf {
  const bad = (msg: string): never => fail('BAD_FILE', `${source}: ${msg}`);
  if (typeof json !== 'object' || json === null || Array.isArray(json)) return bad('must be a JSON object');
  // A LLaDA config is a Llama decoder's under other field names, made masked diffusion.
  const c = (json as Record<string, unknown>).model_type === LLADA_MODEL_TYPE ? lladaToLlamaConfig(json as Record<string, unknown>, source) : (json as Record<string, unknown>);
  let modelType = c.model_type;
  if (modelType === DIFFUSION_MODEL_TYPE) {
    const base = (c.mdlm as Record<string, unknown> | undefined)?.base_model_type;
    if (!isBaseModelType(base)) return bad(`model_type ${DIFFUSION_MODEL_TYPE} needs mdlm.base_model_type llama, qwen2 or qwen3, got ${JSON.stringify(base)}`);
    modelType = base;
  }
  if (typeof modelType === 'string' && modelType.toLowerCase() === 'dream') {
    bad("model_type Dream is not read yet: Dream's logits at position i predict token i + 1 (its Qwen2 weights keep the AR shift), while mdlm's diffusion models predict each masked token at its own position");
  }
  if (!isBaseModelType(modelType)) {
    return bad(`model_type ${JSON.stringify(modelType)} is not supported; mdlm reads llama, qwen2, qwen3 and llada configs`);
  }
  const int = (k: string, dflt?: number): number => {
    const v = c[k] ?? dflt;
    if (v === undefined) return bad(`missing "${k}"`);
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 1) return bad(`"${k}" must be a positive integer, got ${JSON.stringify(v)}`);
    return v;
  };
  const num = (k: string, dflt: number): number => {
    const v = c[k] ?? dflt;
    if (typeof v !== 'number' || !(v > 0)) return bad(`"${k}" must be a positive number, got ${JSON.stringify(v)}`);
    return v;
  };
  const act = c.hidden_act ?? 'silu';
  if (act !== 'silu') bad(`hidden_act ${JSON.stringify(act)} is not supported; mdlm's MLP is SwiGLU (silu)`);
  if (c.rope_scaling !== undefined && c.rope_scaling !== null) bad(`rope_scaling ${JSON.stringify(c.rope_scaling)} is not supported; mdlm implements plain RoPE`);
  const ropeTheta = ropeThetaOf(c, bad);
  if (c.use_sliding_window === true) bad('use_sliding_window true is not supported; mdlm uses full attention');
  if (c.mlp_bias === true) bad('mlp_bias true is not supported: mdlm MLP projections have no biases');
  if (modelType === 'llama' && c.attention_bias === true) bad('attention_bias true (Llama: biases on q, k, v and o) is not supported; mdlm can hold q/k/v biases only (Qwen2 style)');
  const dModel = int('hidden_size');
  const nHeads = int('num_attention_heads');
  if (dModel % nHeads !== 0) bad(`hidden_size ${dModel} is not a multiple of num_attention_heads ${nHeads}`);
  if (c.head_dim !== undefined && c.head_dim !== null && c.head_dim !== dModel / nHeads) {
    bad(`head_dim ${JSON.stringify(c.head_dim)} differs from hidden_size / num_attention_heads = ${dModel / nHeads}; mdlm derives the head dimension from model.dModel / model.nHeads`);
  }
  const nKvHeads = int('num_key_value_heads', nHeads);
  if (nHeads % nKvHeads !== 0) bad(`num_key_value_heads ${nKvHeads} does not divide num_attention_heads ${nHeads}`);
  const tie = c.tie_word_embeddings ?? false;
  if (typeof tie !== 'boolean') bad(`"tie_word_embeddings" must be true or false, got ${JSON.stringify(tie)}`);
  const tokenId = (k: string): number | null => {
    const v = c[k];
    if (Array.isArray(v)) return typeof v[0] === 'number' ? v[0] : null; // Llama 3 lists several EOS ids
    return typeof v === 'number' ? v : null;
  };
  const raw = {
    vocabSize: int('vocab_size'),
    dModel,
    nLayers: int('num_hidden_layers'),
    nHeads,
    nKvHeads,
    ffnHidden: int('intermediate_size', defaultFfnHidden(dModel)),
    seqLen: int('max_position_embeddings', 2048),
    ropeTheta,
    normEps: num('rms_norm_eps', 1e-6),
    qkNorm: modelType === 'qwen3',
    qkvBias: modelType === 'qwen2',
    tieEmbeddings: tie as boolean,
    initStd: num('initializer_range', 0.02),
  };
  const parsed = ModelSchema.safeParse(raw);
  if (!parsed.success) bad(`gives an invalid model config: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`);
  const model = raw as ModelConfig;
  const hd = dModel / nHeads;
  if (hd % 2 !== 0) bad(`head dimension ${hd} is odd; RoPE needs an even head dimension`);

  const result: ModelFromHf = {
    model,
    modelType,
    torchDtype: typeof c.torch_dtype === 'string' ? c.torch_dtype : undefined,
    bosTokenId: tokenId('bos_token_id'),
    eosTokenId: tokenId('eos_token_id'),
  };
  if (c.mdlm !== undefined) result.mdlm = readMdlmSection(c.mdlm, model, source);
  return result;
}

/**
 * RoPE base from transformers 5's `rope_parameters` ({rope_type: 'default', rope_theta}) or the
 * older top-level `rope_theta`; any scaled RoPE type is refused.
 */
function ropeThetaOf(c: Record<string, unknown>, bad: (msg: string) => never): number {
  const p = c.rope_parameters;
  let theta = c.rope_theta;
  if (p !== undefined && p !== null) {
    if (typeof p !== 'object' || Array.isArray(p)) return bad(`rope_parameters must be an object, got ${JSON.stringify(p)}`);
    const params = p as Record<string, unknown>;
    const type = params.rope_type ?? params.type ?? 'default';
    if (type !== 'default') bad(`rope_parameters.rope_type ${JSON.stringify(type)} is not supported; mdlm implements plain RoPE (rope_type default)`);
    const other = Object.keys(params).filter((k) => !['rope_type', 'type', 'rope_theta'].includes(k));
    if (other.length) bad(`rope_parameters has ${other.join(', ')}, which mdlm does not implement (plain RoPE takes rope_theta only)`);
    if (params.rope_theta !== undefined) {
      if (theta !== undefined && theta !== params.rope_theta) bad(`rope_theta ${JSON.stringify(theta)} and rope_parameters.rope_theta ${JSON.stringify(params.rope_theta)} disagree`);
      theta = params.rope_theta;
    }
  }
  theta ??= 10000;
  if (typeof theta !== 'number' || !(theta > 1)) return bad(`rope_theta must be a number > 1, got ${JSON.stringify(theta)}`);
  return theta;
}

function readMdlmSection(v: unknown, model: ModelConfig, source: string): MdlmSection {
  const bad = (msg: string): never => fail('BAD_FILE', `${source}: mdlm section: ${msg}`);
  if (typeof v !== 'object' || v === null) return bad('must be an object');
  const s = v as Record<string, unknown>;
  if (s.version !== 1) bad(`version ${JSON.stringify(s.version)} is not supported (this mdlm writes version 1)`);
  if (s.objective !== 'ar' && s.objective !== 'mdlm') bad(`objective ${JSON.stringify(s.objective)} must be ar or mdlm`);
  const mask = s.mask_token_id;
  if (mask !== null && (typeof mask !== 'number' || !Number.isInteger(mask) || mask < 0 || mask >= model.vocabSize)) {
    bad(`mask_token_id ${JSON.stringify(mask)} must be null or an id below vocab_size ${model.vocabSize}`);
  }
  // Older checkpoints named the decoder only in model_type.
  const arch = hfArchitecture(model);
  if (s.base_model_type !== undefined && s.base_model_type !== arch.modelType) bad(`base_model_type ${JSON.stringify(s.base_model_type)} disagrees with the model's fields (${arch.modelType})`);
  const out: MdlmSection = {
    version: 1, objective: s.objective as 'ar' | 'mdlm', mask_token_id: mask as number | null, bidirectional: s.bidirectional === true,
    base_model_type: arch.modelType, base_architecture: arch.architecture,
  };
  if (s.config !== undefined) {
    const cfg = parseConfig(s.config, new Map(), `${source}: mdlm.config is not a valid mdlm config`);
    const diff = (Object.keys(model) as (keyof ModelConfig)[]).filter((k) => cfg.model[k] !== model[k]);
    if (diff.length) bad(`mdlm.config.model disagrees with the Hugging Face fields on ${diff.map((k) => `${k} (${String(cfg.model[k])} vs ${String(model[k])})`).join(', ')}; the file was edited by hand?`);
    out.config = cfg;
  }
  return out;
}
