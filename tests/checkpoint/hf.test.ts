import { describe, expect, test } from 'vitest';
import { MdlmError } from '../../src/errors.js';
import { resolveConfig } from '../../src/config/load.js';
import { paramCount } from '../../src/config/model-size.js';
import type { ModelConfig } from '../../src/config/schema.js';
import { fromHfTensors, hfConfigFromModel, modelFromHfConfig, paramSpecs, toHfTensors } from '../../src/checkpoint/hf.js';
import { decodeSafetensors, encodeSafetensors, type LoadedTensor } from '../../src/checkpoint/safetensors.js';

const tinyModel = (over: Partial<ModelConfig> = {}): ModelConfig => ({
  ...resolveConfig({ overrides: { 'model.dModel': '16', 'model.nLayers': '2', 'model.nHeads': '4', 'model.nKvHeads': '2', 'model.ffnHidden': '24', 'model.seqLen': '32' } }).model,
  ...over,
});

function randomParams(m: ModelConfig, seed = 1): Record<string, Float32Array> {
  let s = seed;
  const rnd = () => ((s = (s * 1103515245 + 12345) >>> 0) / 2 ** 32) * 2 - 1;
  return Object.fromEntries(paramSpecs(m).map((p) => [p.name, Float32Array.from({ length: p.shape.reduce((a, b) => a * b, 1) }, rnd)]));
}

function asLoaded(m: ModelConfig, params: Record<string, Float32Array>): Record<string, LoadedTensor> {
  return decodeSafetensors(encodeSafetensors(toHfTensors(m, params))).tensors;
}

function err(fn: () => unknown, code: string): string {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(MdlmError);
    expect((e as MdlmError).code).toBe(code);
    return (e as Error).message;
  }
  throw new Error(`expected ${code}`);
}

describe('parameter map', () => {
  test('HF names and [out, in] shapes; counts agree with paramCount', () => {
    const m = resolveConfig({ preset: 'llama-124m' }).model;
    const specs = paramSpecs(m);
    const total = specs.reduce((a, s) => a + s.shape.reduce((x, y) => x * y, 1), 0);
    expect(total).toBe(paramCount(m));
    const by = new Map(specs.map((s) => [s.hf, s]));
    expect(by.get('model.embed_tokens.weight')!.shape).toEqual([50304, 768]);
    expect(by.get('model.layers.11.self_attn.q_proj.weight')).toMatchObject({ name: 'layers.11.attn.wq', shape: [768, 768] });
    expect(by.get('model.layers.0.mlp.gate_proj.weight')).toMatchObject({ name: 'layers.0.mlp.w_gate', shape: [2048, 768] });
    expect(by.get('model.layers.0.mlp.down_proj.weight')!.shape).toEqual([768, 2048]);
    expect(by.get('model.layers.3.post_attention_layernorm.weight')!.shape).toEqual([768]);
    expect(by.get('model.norm.weight')).toBeDefined();
    expect(by.has('lm_head.weight')).toBe(false);
    const g = tinyModel({ qkvBias: true, tieEmbeddings: false, qkNorm: true });
    const gs = new Map(paramSpecs(g).map((s) => [s.hf, s]));
    expect(gs.get('model.layers.1.self_attn.k_proj.weight')!.shape).toEqual([8, 16]); // 2 kv heads × hd 4
    expect(gs.get('model.layers.1.self_attn.v_proj.bias')!.shape).toEqual([8]);
    expect(gs.get('model.layers.1.self_attn.q_proj.bias')!.shape).toEqual([16]);
    expect(gs.get('model.layers.0.self_attn.q_norm.weight')!.shape).toEqual([4]);
    expect(gs.get('lm_head.weight')!.shape).toEqual([264, 16]);
    expect(paramSpecs(g).reduce((a, s) => a + s.shape.reduce((x, y) => x * y, 1), 0)).toBe(paramCount(g));
  });

  test('mdlm → HF → mdlm is bit-exact', () => {
    for (const m of [tinyModel(), tinyModel({ qkvBias: true, tieEmbeddings: false })]) {
      const p = randomParams(m);
      const back = fromHfTensors(m, asLoaded(m, p), 'mem');
      expect(Object.keys(back).sort()).toEqual(Object.keys(p).sort());
      for (const k of Object.keys(p)) expect(Buffer.from(back[k]!.buffer, back[k]!.byteOffset, back[k]!.byteLength).equals(Buffer.from(p[k]!.buffer)), k).toBe(true);
    }
  });

  test('mismatches are clear BAD_FILE errors', () => {
    const m = tinyModel();
    const loaded = asLoaded(m, randomParams(m));
    const without = { ...loaded };
    delete without['model.layers.1.mlp.up_proj.weight'];
    expect(err(() => fromHfTensors(m, without, 'ckpt'), 'BAD_FILE')).toMatch(/ckpt .*lacks 1 tensor.*model\.layers\.1\.mlp\.up_proj\.weight \(mdlm layers\.1\.mlp\.w_up\)/s);
    expect(err(() => fromHfTensors(tinyModel({ ffnHidden: 32 }), loaded, 'ckpt'), 'BAD_FILE')).toMatch(/gate_proj\.weight has shape \[24, 16\] but the model config needs \[32, 16\]/);
    // Another model config misshapes most tensors: one line, the first of them and a count.
    const wide = err(() => fromHfTensors(tinyModel({ dModel: 32, ffnHidden: 48 }), loaded, 'ckpt'), 'BAD_FILE');
    expect(wide).toBe('ckpt does not match the model config: model.embed_tokens.weight has shape [264, 16] but the model config needs [264, 32] (mdlm embed) (and 19 more tensors of other shapes)');
    // Qwen2-style biases into a model without them.
    const qm = tinyModel({ qkvBias: true });
    const qwen = asLoaded(qm, randomParams(qm));
    expect(err(() => fromHfTensors(m, qwen, 'qwen'), 'BAD_FILE')).toMatch(/q\/k\/v projection biases .* set model\.qkvBias true/);
    // Separate lm_head while tied; untied model from tied checkpoint.
    const um = tinyModel({ tieEmbeddings: false });
    const untied = asLoaded(um, randomParams(um));
    expect(err(() => fromHfTensors(m, untied, 'u'), 'BAD_FILE')).toMatch(/separate lm_head\.weight but model\.tieEmbeddings is true/);
    expect(err(() => fromHfTensors(um, loaded, 't'), 'BAD_FILE')).toMatch(/set model\.tieEmbeddings true/);
    // A stored copy of the tied matrix is fine; inv_freq buffers are ignored; unknown tensors are not.
    const withCopy = { ...loaded, 'lm_head.weight': loaded['model.embed_tokens.weight']!, 'model.layers.0.self_attn.rotary_emb.inv_freq': loaded['model.norm.weight']! };
    expect(Object.keys(fromHfTensors(m, withCopy, 'c'))).toHaveLength(paramSpecs(m).length);
    expect(err(() => fromHfTensors(m, { ...loaded, 'model.layers.0.self_attn.o_proj.bias': loaded['model.norm.weight']! }, 'o'), 'BAD_FILE')).toMatch(/cannot hold: model\.layers\.0\.self_attn\.o_proj\.bias/);
  });

  test('bf16 export decodes to the bf16-rounded values', () => {
    const m = tinyModel();
    const p = randomParams(m);
    const back = fromHfTensors(m, decodeSafetensors(encodeSafetensors(toHfTensors(m, p, 'BF16'))).tensors, 'bf16');
    const x = p['layers.0.attn.wq']![5]!, y = back['layers.0.attn.wq']![5]!;
    expect(y).not.toBe(x);
    expect(Math.abs(y - x)).toBeLessThanOrEqual(Math.abs(x) * 2 ** -8);
  });
});

describe('config.json', () => {
  test('Llama config written with the HF fields and an mdlm section; reads back to the same model', () => {
    const cfg = resolveConfig({ preset: 'llama-124m' });
    const j = hfConfigFromModel(cfg.model, { trainConfig: cfg, torchDtype: 'bfloat16', bosTokenId: 50256, eosTokenId: 50256 });
    expect(j).toMatchObject({
      architectures: ['MdlmForMaskedDiffusion'], model_type: 'mdlm', hidden_size: 768, intermediate_size: 2048, num_attention_heads: 12,
      num_key_value_heads: 12, num_hidden_layers: 12, vocab_size: 50304, max_position_embeddings: 1024, rms_norm_eps: 1e-5,
      rope_theta: 10000, tie_word_embeddings: true, torch_dtype: 'bfloat16', bos_token_id: 50256, eos_token_id: 50256, hidden_act: 'silu',
      mdlm: { version: 1, objective: 'mdlm', mask_token_id: 50257, bidirectional: true, base_model_type: 'llama', base_architecture: 'LlamaForCausalLM' },
    });
    const back = modelFromHfConfig(JSON.parse(JSON.stringify(j)));
    expect(back.model).toEqual(cfg.model);
    expect(back.mdlm!.config).toEqual(cfg);
    expect(back.bosTokenId).toBe(50256);
    const ar = hfConfigFromModel(cfg.model, { objective: { ...cfg.objective, kind: 'ar' } });
    expect(ar).toMatchObject({ architectures: ['LlamaForCausalLM'], model_type: 'llama', mdlm: { objective: 'ar', mask_token_id: null, bidirectional: false } });
    expect(hfConfigFromModel(tinyModel({ qkvBias: true })).model_type).toBe('qwen2');
    expect(modelFromHfConfig(hfConfigFromModel(tinyModel({ qkNorm: true }))).model).toEqual(tinyModel({ qkNorm: true }));
  });

  test('a diffusion checkpoint names an architecture transformers has no causal LM for, and its decoder in the mdlm section', () => {
    const mdlm = resolveConfig({ overrides: { 'model.qkvBias': 'true', 'model.dModel': '64', 'model.nHeads': '4' } });
    const j = hfConfigFromModel(mdlm.model, { trainConfig: mdlm });
    expect(j).toMatchObject({ architectures: ['MdlmForMaskedDiffusion'], model_type: 'mdlm', mdlm: { objective: 'mdlm', mask_token_id: 257, base_model_type: 'qwen2', base_architecture: 'Qwen2ForCausalLM' } });
    const back = modelFromHfConfig(JSON.parse(JSON.stringify(j)), 'd/config.json');
    expect([back.modelType, back.mdlm!.objective, back.mdlm!.mask_token_id]).toEqual(['qwen2', 'mdlm', 257]);
    expect(back.model).toEqual(mdlm.model);
    const e = (section: object) => err(() => modelFromHfConfig({ ...j, mdlm: section }, 'd/config.json'), 'BAD_FILE');
    expect(e({ version: 1, objective: 'mdlm', mask_token_id: 257 })).toMatch(/d\/config\.json: model_type mdlm needs mdlm\.base_model_type llama, qwen2 or qwen3, got undefined/);
    // Older checkpoints: model_type llama and an mdlm section without the base fields.
    const old = { ...hfConfigFromModel(tinyModel()), mdlm: { version: 1, objective: 'mdlm', mask_token_id: 263, bidirectional: true } };
    expect(modelFromHfConfig(old).mdlm).toMatchObject({ objective: 'mdlm', mask_token_id: 263, base_model_type: 'llama' });
  });

  test('a Qwen2 config reads into a model with q/k/v biases', () => {
    const qwen2 = {
      architectures: ['Qwen2ForCausalLM'], model_type: 'qwen2', hidden_size: 896, intermediate_size: 4864, num_attention_heads: 14,
      num_key_value_heads: 2, num_hidden_layers: 24, vocab_size: 151936, max_position_embeddings: 32768, rms_norm_eps: 1e-6,
      rope_theta: 1000000, tie_word_embeddings: true, torch_dtype: 'bfloat16', bos_token_id: 151643, eos_token_id: 151643,
      hidden_act: 'silu', use_sliding_window: false, sliding_window: 32768, max_window_layers: 21, attention_dropout: 0, initializer_range: 0.02,
    };
    const r = modelFromHfConfig(qwen2, 'qwen2/config.json');
    expect(r.modelType).toBe('qwen2');
    expect(r.model).toEqual({ vocabSize: 151936, dModel: 896, nLayers: 24, nHeads: 14, nKvHeads: 2, ffnHidden: 4864, seqLen: 32768, ropeTheta: 1e6, normEps: 1e-6, qkNorm: false, qkvBias: true, tieEmbeddings: true, initStd: 0.02 });
    expect(paramSpecs(r.model).some((s) => s.hf === 'model.layers.23.self_attn.k_proj.bias' && s.shape[0] === 128)).toBe(true);
    expect(r.mdlm).toBeUndefined();
  });

  test('RoPE and dtype in both transformers 4 (rope_theta, torch_dtype) and 5 (rope_parameters, dtype) spellings', () => {
    const j = hfConfigFromModel(tinyModel({ ropeTheta: 500000 })) as Record<string, unknown>;
    expect(j).toMatchObject({ rope_theta: 500000, rope_parameters: { rope_type: 'default', rope_theta: 500000 }, torch_dtype: 'float32', dtype: 'float32' });
    expect(j).not.toHaveProperty('rope_scaling');
    const { rope_theta: _theta, mdlm: _mdlm, ...v5 } = j;
    expect(modelFromHfConfig(v5).model.ropeTheta).toBe(500000);
    expect(modelFromHfConfig({ ...v5, rope_parameters: { rope_type: 'default' }, rope_theta: 2500 }).model.ropeTheta).toBe(2500);
    expect(modelFromHfConfig({ ...v5, rope_parameters: undefined }).model.ropeTheta).toBe(10000);
    const e = (over: object) => err(() => modelFromHfConfig({ ...v5, ...over }, 'x/config.json'), 'BAD_FILE');
    expect(e({ rope_parameters: { rope_type: 'yarn', rope_theta: 1e4, factor: 4 } })).toMatch(/rope_type "yarn" is not supported/);
    expect(e({ rope_parameters: { rope_type: 'default', rope_theta: 1e4, partial_rotary_factor: 0.5 } })).toMatch(/partial_rotary_factor/);
    expect(e({ rope_theta: 1e4, rope_parameters: { rope_theta: 2e4 } })).toMatch(/disagree/);
  });

  test('configs mdlm cannot represent are refused with the reason', () => {
    const base = hfConfigFromModel(tinyModel()) as Record<string, unknown>;
    delete base.mdlm;
    const e = (over: object) => err(() => modelFromHfConfig({ ...base, ...over }, 'x/config.json'), 'BAD_FILE');
    expect(e({ model_type: 'mistral' })).toMatch(/x\/config\.json: model_type "mistral" is not supported/);
    expect(e({ rope_scaling: { rope_type: 'llama3', factor: 8 } })).toMatch(/rope_scaling .* not supported/);
    expect(e({ head_dim: 8 })).toMatch(/head_dim 8 differs/);
    expect(e({ hidden_act: 'gelu' })).toMatch(/hidden_act "gelu"/);
    expect(e({ attention_bias: true })).toMatch(/attention_bias true/);
    expect(e({ num_key_value_heads: 3 })).toMatch(/num_key_value_heads 3 does not divide/);
    expect(e({ hidden_size: undefined })).toMatch(/missing "hidden_size"/);
    expect(e({ mdlm: { version: 1, objective: 'mdlm', mask_token_id: 99999 } })).toMatch(/mask_token_id 99999/);
    expect(err(() => hfConfigFromModel(tinyModel({ qkvBias: true, qkNorm: true })), 'BAD_CONFIG')).toMatch(/no Hugging Face architecture/);
  });
});
