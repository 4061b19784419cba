import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync, truncateSync, statSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, test } from 'vitest';
import { MdlmError } from '../../src/errors.js';
import { resolveConfig } from '../../src/config/load.js';
import type { TrainConfig } from '../../src/config/schema.js';
import { paramSpecs, toHfTensors } from '../../src/checkpoint/hf.js';
import { writeSafetensors } from '../../src/checkpoint/safetensors.js';
import {
  latestCheckpoint, listCheckpoints, loadCheckpoint, loadModel, resolveModelDir, saveCheckpoint, stepDirName, type CheckpointData,
} from '../../src/checkpoint/checkpoint.js';

const root = mkdtempSync(join(tmpdir(), 'mdlm-ckpt-'));
let n = 0;
const outDir = () => join(root, `run${n++}`);

const config: TrainConfig = resolveConfig({ overrides: { 'model.dModel': '16', 'model.nLayers': '2', 'model.nHeads': '2', 'model.ffnHidden': '32', 'model.seqLen': '32' } });

function data(step: number, seed = step + 1): CheckpointData {
  let s = seed;
  const rnd = () => ((s = (s * 1664525 + 1013904223) >>> 0) / 2 ** 32) * 2 - 1;
  const tensors = Object.fromEntries(paramSpecs(config.model).map((p) => [p.name, Float32Array.from({ length: p.shape.reduce((a, b) => a * b, 1) }, rnd)]));
  const nan = new Float32Array(3);
  new Uint32Array(nan.buffer).set([0x7fc00123, 0x80000000, 0x00000001]);
  tensors['final_norm']!.set(nan, 0);
  return {
    config,
    tensors,
    optimizer: { 'exp_avg': Float32Array.from({ length: 100 }, rnd), 'exp_avg_sq': { dtype: 'F32', shape: [10, 10], data: Float32Array.from({ length: 100 }, rnd) } },
    trainerState: { step, rng: { seed: 1234, counter: [1, 2, 3, 4] }, dataCursor: { shard: 0, offset: 4096 * step }, config },
    tokenizerFiles: { 'tokenizer.json': '{"model":{"type":"byte"}}', 'special_tokens_map.json': new TextEncoder().encode('{}') },
  };
}

const bits = (a: Float32Array) => Buffer.from(a.buffer, a.byteOffset, a.byteLength);

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

describe('save and load', () => {
  test('save → load is bit-exact, HF layout on disk, latest pointer updated', () => {
    const out = outDir();
    const d = data(100);
    const dir = saveCheckpoint(out, d);
    expect(dir).toBe(join(out, 'step-0000100'));
    expect(readdirSync(dir).sort()).toEqual(['complete', 'config.json', 'model.safetensors', 'optimizer.safetensors', 'special_tokens_map.json', 'tokenizer.json', 'trainer_state.json']);
    expect(readFileSync(join(out, 'latest'), 'utf8')).toBe('step-0000100\n');
    expect(readdirSync(out).filter((f) => f.startsWith('.'))).toEqual([]);
    const hf = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8'));
    expect(hf).toMatchObject({ architectures: ['MdlmForMaskedDiffusion'], model_type: 'mdlm', hidden_size: 16, num_hidden_layers: 2, torch_dtype: 'float32', mdlm: { objective: 'mdlm', mask_token_id: 257, base_model_type: 'llama' } });
    expect(readFileSync(join(dir, 'model.safetensors')).includes('model.layers.1.mlp.down_proj.weight')).toBe(true);

    const ck = loadCheckpoint(dir, { model: config.model });
    expect(ck.step).toBe(100);
    expect(ck.config).toEqual(config);
    expect(ck.model).toEqual(config.model);
    expect(Object.keys(ck.tensors).sort()).toEqual(Object.keys(d.tensors).sort());
    for (const [k, v] of Object.entries(d.tensors)) expect(bits(ck.tensors[k]!).equals(bits(v)), k).toBe(true);
    expect(bits(ck.optimizer['exp_avg']!.data as Float32Array).equals(bits(d.optimizer!['exp_avg'] as Float32Array))).toBe(true);
    expect(ck.optimizer['exp_avg_sq']!.shape).toEqual([10, 10]);
    expect(ck.trainerState).toEqual(JSON.parse(JSON.stringify(d.trainerState)));
    expect(ck.tokenizerFiles.map((f) => f.slice(dir.length + 1)).sort()).toEqual(['special_tokens_map.json', 'tokenizer.json']);
    expect(latestCheckpoint(out)).toEqual({ dir, step: 100 });
  });

  test('bf16 model weights load as the bf16-rounded values', () => {
    const out = outDir();
    const d = data(5);
    const ck = loadCheckpoint(saveCheckpoint(out, d, { modelDtype: 'BF16' }));
    expect(JSON.parse(readFileSync(join(ck.dir, 'config.json'), 'utf8')).torch_dtype).toBe('bfloat16');
    const a = d.tensors['layers.0.attn.wq']!, b = ck.tensors['layers.0.attn.wq']!;
    for (let i = 0; i < a.length; i++) expect(Math.abs(a[i]! - b[i]!)).toBeLessThanOrEqual(Math.abs(a[i]!) * 2 ** -8);
  });

  test('keepLast prunes old checkpoints; re-saving a step replaces it', () => {
    const out = outDir();
    for (const s of [1, 2, 3, 4]) saveCheckpoint(out, data(s), { keepLast: 2 });
    expect(readdirSync(out).filter((f) => f.startsWith('step-')).sort()).toEqual(['step-0000003', 'step-0000004']);
    saveCheckpoint(out, data(4, 99), { keepLast: 2 });
    expect(bits(loadCheckpoint(join(out, 'step-0000004')).tensors['embed']!).equals(bits(data(4, 99).tensors['embed']!))).toBe(true);
    expect(readdirSync(out).filter((f) => f.startsWith('.'))).toEqual([]);
  });

  test('bad input is refused before anything is written', () => {
    const out = outDir();
    const d = data(7);
    delete d.tensors['layers.1.mlp.w_up'];
    expect(err(() => saveCheckpoint(out, d), 'BAD_ARGUMENT')).toMatch(/layers\.1\.mlp\.w_up/);
    expect(err(() => saveCheckpoint(out, { ...data(7), tokenizerFiles: { 'config.json': '{}' } }), 'BAD_ARGUMENT')).toMatch(/config\.json/);
    expect(existsSync(out)).toBe(false);
  });
});

describe('crashes and corruption', () => {
  test('a half-written temp dir, a step dir without manifest and bad files, and a size-mismatched one are ignored', () => {
    const out = outDir();
    saveCheckpoint(out, data(10));
    // Crash mid-save of step 20: temp dir with partial files.
    const tmp = join(out, `.tmp-${stepDirName(20)}-99999`);
    mkdirSync(tmp);
    writeFileSync(join(tmp, 'config.json'), '{"model_type": "llama"');
    writeFileSync(join(tmp, 'model.safetensors'), new Uint8Array(100));
    // A step dir copied by hand, never finished: no manifest, truncated weights.
    const s30 = saveCheckpoint(join(root, 'scratch'), data(30));
    const half = join(out, 'step-0000030');
    mkdirSync(half);
    for (const f of ['config.json', 'trainer_state.json', 'model.safetensors']) writeFileSync(join(half, f), readFileSync(join(s30, f)));
    truncateSync(join(half, 'model.safetensors'), statSync(join(half, 'model.safetensors')).size - 10);
    // A step dir whose manifest disagrees with a file size.
    const s40 = saveCheckpoint(out, data(40));
    truncateSync(join(s40, 'optimizer.safetensors'), 64);
    const list = listCheckpoints(out);
    expect(list.map((c) => [c.step, c.complete])).toEqual([[40, false], [30, false], [10, true]]);
    expect(list[0]!.problem).toMatch(/optimizer\.safetensors is 64 bytes/);
    expect(list[1]!.problem).toMatch(/model\.safetensors/);
    // latest names the damaged step 40: the highest complete step stands in, and says why.
    expect(latestCheckpoint(out)).toEqual({ dir: join(out, 'step-0000010'), step: 10, passedOver: expect.stringMatching(/^latest names step-0000040, which is damaged \(optimizer\.safetensors is 64 bytes/) });
    expect(err(() => loadCheckpoint(s40), 'BAD_FILE')).toMatch(/step-0000040 is incomplete or damaged: optimizer\.safetensors is 64 bytes/);
    // A complete step dir without a manifest (e.g. written by another tool) counts.
    const s50 = saveCheckpoint(out, data(50));
    rmSync(join(s50, 'complete'));
    expect(latestCheckpoint(out)!.step).toBe(50);
    expect(latestCheckpoint(join(root, 'nothing-here'))).toBeNull();
  });

  test('corrupt model.safetensors is a clear BAD_FILE naming the file', () => {
    const out = outDir();
    const dir = saveCheckpoint(out, data(3));
    const p = join(dir, 'model.safetensors');
    const bytes = readFileSync(p);
    const headerLen = Number(bytes.readBigUInt64LE(0));
    // Same size (the manifest still matches), broken header JSON.
    const broken = Buffer.from(bytes);
    broken.write('#', 8 + Math.floor(headerLen / 2));
    writeFileSync(p, broken);
    expect(err(() => loadCheckpoint(dir), 'BAD_FILE')).toMatch(new RegExp(`${p.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}: header is not valid JSON`));
    // A weight with the wrong shape for the config (edit the header, keep the size).
    const text = bytes.toString('utf8', 8, 8 + headerLen);
    const swapped = text.replace(/"model\.norm\.weight":\{"dtype":"F32","shape":\[16\]/, '"model.norm.weight":{"dtype":"F32","shape":[4,4]');
    expect(swapped).not.toBe(text);
    const edited = Buffer.from(bytes);
    edited.write(swapped, 8);
    writeFileSync(p, edited);
    expect(err(() => loadCheckpoint(dir), 'BAD_FILE')).toMatch(/model\.norm\.weight has shape \[4, 4\] but the model config needs \[16\]/);
    // Resuming with another model config.
    writeFileSync(p, bytes);
    expect(err(() => loadCheckpoint(dir, { model: { ...config.model, nLayers: 3 } }), 'BAD_CONFIG')).toMatch(/model\.nLayers is 2 there, 3 here/);
    expect(err(() => loadCheckpoint(join(out, 'step-0000009')), 'NOT_FOUND')).toMatch(/does not exist/);
  });
});

describe('model directories', () => {
  test("a transformers 5 save_pretrained directory loads as a model (no training state); a run's out dir resolves to its newest checkpoint", () => {
    const dir = join(root, 'hf-model');
    mkdirSync(dir);
    const m = config.model;
    const d = data(1);
    // What LlamaForCausalLM.save_pretrained writes (transformers 5: rope_parameters and dtype; tied head not stored).
    writeFileSync(join(dir, 'config.json'), JSON.stringify({
      architectures: ['LlamaForCausalLM'], attention_bias: false, attention_dropout: 0.0, bos_token_id: null, dtype: 'float32', eos_token_id: 256,
      head_dim: m.dModel / m.nHeads, hidden_act: 'silu', hidden_size: m.dModel, initializer_range: 0.02, intermediate_size: m.ffnHidden,
      max_position_embeddings: m.seqLen, mlp_bias: false, model_type: 'llama', num_attention_heads: m.nHeads, num_hidden_layers: m.nLayers,
      num_key_value_heads: m.nKvHeads, pad_token_id: null, pretraining_tp: 1, rms_norm_eps: 1e-5, rope_parameters: { rope_theta: 5000.0, rope_type: 'default' },
      tie_word_embeddings: true, transformers_version: '5.17.0', use_cache: true, vocab_size: m.vocabSize,
    }));
    writeSafetensors(join(dir, 'model.safetensors'), toHfTensors(m, d.tensors), { metadata: { format: 'pt' } });
    expect(resolveModelDir(dir)).toBe(dir);
    const loaded = loadModel(dir);
    expect(loaded.model).toEqual({ ...m, ropeTheta: 5000 });
    expect(loaded.mdlm).toBeUndefined();
    expect(loaded.eosTokenId).toBe(256);
    for (const [name, t] of Object.entries(d.tensors)) expect(bits(loaded.tensors[name]!)).toEqual(bits(t));
    expect(err(() => loadCheckpoint(dir), 'BAD_FILE')).toMatch(/trainer_state\.json is missing/);

    const out = outDir();
    saveCheckpoint(out, data(1));
    saveCheckpoint(out, data(2));
    expect(resolveModelDir(out)).toBe(join(out, stepDirName(2)));
    truncateSync(join(out, stepDirName(2), 'model.safetensors'), 100);
    expect(resolveModelDir(out)).toBe(join(out, stepDirName(1)));
    expect(err(() => resolveModelDir(join(root, 'nowhere')), 'NOT_FOUND')).toMatch(/does not exist/);
    const empty = outDir();
    mkdirSync(empty);
    expect(err(() => resolveModelDir(empty), 'NOT_FOUND')).toMatch(/no config\.json and no step-\* checkpoint/);
  });
});
