/**
 * LLaDA checkpoints: one built at random under the released naming and config fields (no hub
 * access) is read by mdlm as a masked-diffusion model with its mask token id, and its logits
 * match a direct computation of LLaDA's llama block written here from its modeling code
 * (RMSNorm, q/k/v, rotate_half RoPE, bidirectional grouped-query attention, attn_out,
 * silu(ff_proj) · up_proj, ff_out, ln_f, the untied ff_out head); `mdlm model export` writes
 * mdlm -> LLaDA -> mdlm with the same bits, in shards with model.safetensors.index.json above
 * --max-shard-size; settings LLaDA has and mdlm does not are refused, and Dream is refused with why.
 */
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadModel } from '../../src/checkpoint/checkpoint.js';
import { modelFromHfConfig } from '../../src/checkpoint/hf.js';
import { type TensorMap, openTensors, readSafetensors, writeSafetensors } from '../../src/checkpoint/safetensors.js';
import { openModel } from '../../src/cli/model.js';
import { resolveRunConfig } from '../../src/config/run.js';
import { MdlmError } from '../../src/errors.js';
import { PhiloxStream, RngPurpose } from '../../src/rng/philox.js';
import { mdlm } from '../support/cli.js';

const C = {
  d: 32, heads: 4, kvHeads: 2, layers: 2, hidden: 24, vocab: 40, ctx: 16, theta: 500000, eps: 1e-5, mask: 37, eos: 38,
};

/** A LLaDA-8B-style config.json at these sizes. */
const LLADA_CONFIG = {
  activation_type: 'silu', alibi: false, alibi_bias_max: 8.0, architectures: ['LLaDAModelLM'], attention_dropout: 0.0,
  attention_layer_norm: false, attention_layer_norm_with_affine: true,
  auto_map: { AutoConfig: 'configuration_llada.LLaDAConfig', AutoModel: 'modeling_llada.LLaDAModelLM', AutoModelForCausalLM: 'modeling_llada.LLaDAModelLM' },
  bias_for_layer_norm: false, block_group_size: 1, block_type: 'llama', d_model: C.d, embedding_dropout: 0.0, embedding_size: C.vocab,
  eos_token_id: C.eos, flash_attention: false, include_bias: false, include_qkv_bias: false, init_cutoff_factor: null, init_device: 'meta',
  init_fn: 'mitchell', init_std: 0.02, input_emb_norm: false, layer_norm_type: 'rms', layer_norm_with_affine: true, mask_token_id: C.mask,
  max_sequence_length: C.ctx, mlp_hidden_size: C.hidden, mlp_ratio: 4, model_type: 'llada', multi_query_attention: null, n_heads: C.heads,
  n_kv_heads: C.kvHeads, n_layers: C.layers, pad_token_id: C.eos, precision: 'amp_bf16', residual_dropout: 0.0, rms_norm_eps: C.eps, rope: true,
  rope_full_precision: true, rope_theta: C.theta, scale_logits: false, transformers_version: '4.46.3', use_cache: false, vocab_size: C.vocab, weight_tying: false,
};

let root: string;
let weights: Record<string, Float32Array>;

function lladaTensors(vocab = C.vocab): Record<string, { shape: number[]; data: Float32Array }> {
  const rng = new PhiloxStream(9, RngPurpose.harness);
  const hd = C.d / C.heads;
  const t = (shape: number[], scale = 0.3, offset = 0) => ({ shape, data: Float32Array.from({ length: shape.reduce((a, b) => a * b, 1) }, () => offset + scale * (2 * rng.uniform() - 1)) });
  const out: Record<string, { shape: number[]; data: Float32Array }> = { 'model.transformer.wte.weight': t([vocab, C.d], 1) };
  for (let i = 0; i < C.layers; i++) {
    const b = `model.transformer.blocks.${i}.`;
    out[`${b}attn_norm.weight`] = t([C.d], 0.2, 1);
    out[`${b}q_proj.weight`] = t([C.heads * hd, C.d]);
    out[`${b}k_proj.weight`] = t([C.kvHeads * hd, C.d]);
    out[`${b}v_proj.weight`] = t([C.kvHeads * hd, C.d]);
    out[`${b}attn_out.weight`] = t([C.d, C.heads * hd]);
    out[`${b}ff_norm.weight`] = t([C.d], 0.2, 1);
    out[`${b}ff_proj.weight`] = t([C.hidden, C.d]);
    out[`${b}up_proj.weight`] = t([C.hidden, C.d]);
    out[`${b}ff_out.weight`] = t([C.d, C.hidden]);
  }
  out['model.transformer.ln_f.weight'] = t([C.d], 0.2, 1);
  out['model.transformer.ff_out.weight'] = t([vocab, C.d]);
  return out;
}

/** LLaDA's forward (LLaDALlamaBlock, bidirectional), in f64, straight from the LLaDA-named tensors. */
function lladaReference(w: Record<string, Float32Array>, ids: readonly number[]): Float64Array {
  const T = ids.length;
  const hd = C.d / C.heads;
  const linear = (x: Float64Array[], W: Float32Array, out: number) => x.map((row) => {
    const inn = row.length;
    const y = new Float64Array(out);
    for (let o = 0; o < out; o++) {
      let s = 0;
      for (let i = 0; i < inn; i++) s += W[o * inn + i]! * row[i]!;
      y[o] = s;
    }
    return y;
  });
  const rms = (x: Float64Array[], g: Float32Array) => x.map((row) => {
    const ms = row.reduce((a, v) => a + v * v, 0) / row.length;
    const r = 1 / Math.sqrt(ms + C.eps);
    return row.map((v, i) => v * r * g[i]!);
  });
  const rope = (x: Float64Array[], nHeads: number) => x.map((row, pos) => {
    const y = new Float64Array(row.length);
    for (let h = 0; h < nHeads; h++) {
      for (let i = 0; i < hd; i++) {
        const f = pos / C.theta ** ((2 * (i % (hd / 2))) / hd);
        const rot = i < hd / 2 ? -row[h * hd + i + hd / 2]! : row[h * hd + i - hd / 2]!;
        y[h * hd + i] = row[h * hd + i]! * Math.cos(f) + rot * Math.sin(f);
      }
    }
    return y;
  });
  let x = ids.map((id) => Float64Array.from(w['model.transformer.wte.weight']!.subarray(id * C.d, (id + 1) * C.d)));
  for (let l = 0; l < C.layers; l++) {
    const b = `model.transformer.blocks.${l}.`;
    const h = rms(x, w[`${b}attn_norm.weight`]!);
    const q = rope(linear(h, w[`${b}q_proj.weight`]!, C.heads * hd), C.heads);
    const k = rope(linear(h, w[`${b}k_proj.weight`]!, C.kvHeads * hd), C.kvHeads);
    const v = linear(h, w[`${b}v_proj.weight`]!, C.kvHeads * hd);
    const att = ids.map(() => new Float64Array(C.heads * hd));
    for (let head = 0; head < C.heads; head++) {
      const kvh = Math.floor(head / (C.heads / C.kvHeads)); // repeat_interleave of the k/v heads
      for (let i = 0; i < T; i++) {
        const s = Array.from({ length: T }, (_, j) => {
          let dot = 0;
          for (let e = 0; e < hd; e++) dot += q[i]![head * hd + e]! * k[j]![kvh * hd + e]!;
          return dot / Math.sqrt(hd);
        });
        const mx = Math.max(...s);
        const p = s.map((z) => Math.exp(z - mx));
        const z = p.reduce((a, b2) => a + b2, 0);
        for (let j = 0; j < T; j++) for (let e = 0; e < hd; e++) att[i]![head * hd + e] += (p[j]! / z) * v[j]![kvh * hd + e]!;
      }
    }
    const o = linear(att, w[`${b}attn_out.weight`]!, C.d);
    x = x.map((row, i) => row.map((val, e) => val + o[i]![e]!));
    const g = rms(x, w[`${b}ff_norm.weight`]!);
    const gate = linear(g, w[`${b}ff_proj.weight`]!, C.hidden);
    const up = linear(g, w[`${b}up_proj.weight`]!, C.hidden);
    const act = gate.map((row, i) => row.map((val, e) => (val / (1 + Math.exp(-val))) * up[i]![e]!));
    const down = linear(act, w[`${b}ff_out.weight`]!, C.d);
    x = x.map((row, i) => row.map((val, e) => val + down[i]![e]!));
  }
  const logits = linear(rms(x, w['model.transformer.ln_f.weight']!), w['model.transformer.ff_out.weight']!, C.vocab);
  const out = new Float64Array(T * C.vocab);
  logits.forEach((row, i) => out.set(row, i * C.vocab));
  return out;
}

beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), 'mdlm-llada-'));
  const dir = join(root, 'llada');
  mkdirSync(dir);
  const tensors = lladaTensors();
  weights = Object.fromEntries(Object.entries(tensors).map(([k, v]) => [k, v.data]));
  // Sharded as the released checkpoints are: the index and its shards.
  const names = Object.keys(tensors);
  const half = Math.ceil(names.length / 2);
  const weightMap: Record<string, string> = {};
  [names.slice(0, half), names.slice(half)].forEach((part, k) => {
    const file = `model-0000${k + 1}-of-00002.safetensors`;
    const map: TensorMap = {};
    for (const n of part) {
      map[n] = { dtype: 'F32', shape: tensors[n]!.shape, data: tensors[n]!.data };
      weightMap[n] = file;
    }
    writeSafetensors(join(dir, file), map, { metadata: { format: 'pt' } });
  });
  writeFileSync(join(dir, 'model.safetensors.index.json'), JSON.stringify({ metadata: { total_size: 0 }, weight_map: weightMap }));
  writeFileSync(join(dir, 'config.json'), JSON.stringify(LLADA_CONFIG));
  writeFileSync(join(root, 'corpus.txt'), Array.from({ length: 40 }, (_, d) => `document ${d} says the cat sat on the mat and the dog ran by the river.`).join('\n\n') + '\n');
});

afterAll(() => rmSync(root, { recursive: true, force: true }));

function err(fn: () => unknown): string {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(MdlmError);
    return (e as Error).message;
  }
  throw new Error('expected an error');
}

describe('LLaDA checkpoints', () => {
  it('import: a masked-diffusion model with the config\'s mask token id, Llama shapes, every tensor', async () => {
    const m = await openModel(join(root, 'llada'), undefined);
    expect(m.objective).toBe('mdlm');
    expect(m.maskId).toBe(C.mask);
    expect(m.loaded.model).toMatchObject({ vocabSize: C.vocab, dModel: C.d, nLayers: C.layers, nHeads: C.heads, nKvHeads: C.kvHeads, ffnHidden: C.hidden, seqLen: C.ctx, ropeTheta: C.theta, normEps: C.eps, tieEmbeddings: false, qkvBias: false, qkNorm: false });
    expect(m.loaded.eosTokenId).toBe(C.eos);
    expect(m.loaded.tensors['layers.1.mlp.w_gate']).toEqual(weights['model.transformer.blocks.1.ff_proj.weight']);
    expect(m.loaded.tensors['layers.0.attn.wo']).toEqual(weights['model.transformer.blocks.0.attn_out.weight']);
    expect(m.loaded.tensors.lm_head).toEqual(weights['model.transformer.ff_out.weight']);
  });

  it('mdlm eval --save-logits on the LLaDA directory gives the logits of LLaDA\'s forward within 1e-4', () => {
    const ids = [3, 17, C.mask, 25, C.mask, 8, 0, 33, C.mask, 12];
    const file = join(root, 'logits.safetensors');
    const r = mdlm('eval', '--model', join(root, 'llada'), '--save-logits', file, '--ids', ids.join(','), '--backend', 'cpu');
    expect(r.stderr).toMatch(/bidirectional attention/);
    expect(r.code).toBe(0);
    const got = readSafetensors(file).tensors.logits!.data as Float32Array;
    const want = lladaReference(weights, ids);
    let worst = 0;
    want.forEach((v, i) => (worst = Math.max(worst, Math.abs(v - got[i]!))));
    expect(worst).toBeLessThan(1e-4);
    expect(Math.max(...want.map(Math.abs))).toBeGreaterThan(0.5);
  }, 60_000);

  it('mdlm -> LLaDA -> mdlm through mdlm model export keeps every bit, sharded above --max-shard-size', () => {
    const hf = join(root, 'as-hf');
    const r1 = mdlm('model', 'export', '--model', join(root, 'llada'), '--out', hf, '--format', 'hf');
    expect(r1.stderr).toBe('');
    expect(r1.code).toBe(0);
    expect(readdirSync(hf).sort()).toEqual(['config.json', 'model.safetensors']);
    const hfConfig = JSON.parse(readFileSync(join(hf, 'config.json'), 'utf8')) as { model_type: string; mdlm: { mask_token_id: number; objective: string } };
    expect(hfConfig.model_type).toBe('mdlm');
    expect(hfConfig.mdlm).toMatchObject({ objective: 'mdlm', mask_token_id: C.mask });

    const back = join(root, 'back-llada');
    const r2 = mdlm('model', 'export', '--model', hf, '--out', back, '--format', 'llada', '--max-shard-size', '12KB');
    expect(r2.stderr).toBe('');
    expect(r2.code).toBe(0);
    expect(r2.stdout).toMatch(/mask token 37/);
    const index = JSON.parse(readFileSync(join(back, 'model.safetensors.index.json'), 'utf8')) as { metadata: { total_size: number }; weight_map: Record<string, string> };
    const shards = [...new Set(Object.values(index.weight_map))].sort();
    expect(shards.length).toBeGreaterThan(2);
    expect(shards[0]).toBe(`model-00001-of-${String(shards.length).padStart(5, '0')}.safetensors`);
    expect(Object.keys(index.weight_map).sort()).toEqual(Object.keys(weights).sort());
    expect(index.metadata.total_size).toBe(Object.values(weights).reduce((a, w) => a + 4 * w.length, 0));
    for (const s of shards) expect(readFileSync(join(back, s)).length).toBeLessThanOrEqual(12000 + 2000); // tensors ≤ 12 KB, plus the header
    const config = JSON.parse(readFileSync(join(back, 'config.json'), 'utf8')) as Record<string, unknown>;
    for (const k of ['model_type', 'block_type', 'd_model', 'n_heads', 'n_kv_heads', 'n_layers', 'mlp_hidden_size', 'embedding_size', 'vocab_size', 'max_sequence_length', 'rope_theta', 'rms_norm_eps', 'weight_tying', 'mask_token_id', 'eos_token_id', 'include_qkv_bias'] as const) {
      expect(config[k], k).toEqual((LLADA_CONFIG as Record<string, unknown>)[k]);
    }
    // The shards hold the LLaDA names with the original bits.
    const src = openTensors(back);
    for (const [n, w] of Object.entries(weights)) expect(src.readFloat32(n)).toEqual(w);
    src.close();
    const again = loadModel(back);
    const first = loadModel(join(root, 'llada'));
    expect(again.model).toEqual(first.model);
    for (const [k, v] of Object.entries(first.tensors)) expect(again.tensors[k], k).toEqual(v);
    expect(again.mdlm).toMatchObject({ objective: 'mdlm', mask_token_id: C.mask });
  }, 60_000);

  it('export refuses an AR model as LLaDA and an existing model directory', () => {
    const ar = mdlm('model', 'export', '--model', join(root, 'llada'), '--objective', 'ar', '--out', join(root, 'x'), '--format', 'llada');
    expect(ar.code).toBe(1);
    expect(ar.stderr).toMatch(/a LLaDA checkpoint is a masked-diffusion model/);
    expect(existsSync(join(root, 'x'))).toBe(false);
    const again = mdlm('model', 'export', '--model', join(root, 'llada'), '--out', join(root, 'as-hf'));
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(/already holds a model/);
  }, 60_000);

  it('LLaDA settings mdlm has no equivalent of are refused; Dream is refused saying why', () => {
    const read = (over: Record<string, unknown>) => err(() => modelFromHfConfig({ ...LLADA_CONFIG, ...over }, 'x/config.json'));
    expect(read({ block_type: 'sequential' })).toMatch(/x\/config.json: LLaDA config: block_type "sequential" is not supported/);
    expect(read({ alibi: true })).toMatch(/alibi true is not supported/);
    expect(read({ include_bias: true })).toMatch(/include_bias true is not supported/);
    expect(read({ rope_scaling: { type: 'linear', factor: 2 } })).toMatch(/rope_scaling .* is not supported/);
    expect(read({ mask_token_id: 99 })).toMatch(/mask_token_id 99 must be an id below the vocabulary of 40/);
    expect(modelFromHfConfig({ ...LLADA_CONFIG, include_qkv_bias: true }).model.qkvBias).toBe(true);
    expect(modelFromHfConfig({ ...LLADA_CONFIG, weight_tying: true }).model.tieEmbeddings).toBe(true);
    const dream = err(() => modelFromHfConfig({ model_type: 'Dream', hidden_size: 16, num_attention_heads: 4, num_hidden_layers: 1, vocab_size: 40 }));
    expect(dream).toMatch(/Dream is not read yet: Dream's logits at position i predict token i \+ 1/);
  });

  it('mdlm train --init-from a LLaDA directory: a masked-diffusion run with its mask token id, started from its weights', async () => {
    // The byte tokenizer's vocabulary padded as mdlm pads it (264), LLaDA's fields otherwise.
    const dir = join(root, 'llada-byte');
    mkdirSync(dir);
    const tensors = lladaTensors(264);
    const map: TensorMap = {};
    for (const [n, t] of Object.entries(tensors)) map[n] = { dtype: 'F32', shape: t.shape, data: t.data };
    writeSafetensors(join(dir, 'model.safetensors'), map, { metadata: { format: 'pt' } });
    writeFileSync(join(dir, 'config.json'), JSON.stringify({ ...LLADA_CONFIG, vocab_size: 264, embedding_size: 264, mask_token_id: 257, eos_token_id: 256, max_sequence_length: 64 }));
    const r = await resolveRunConfig({ preset: 'nano', initFrom: dir, overrides: { 'data.path': join(root, 'corpus.txt'), 'data.tokenizer': 'byte', out: join(root, 'ft') } });
    expect(r.config.objective.kind).toBe('mdlm');
    expect(r.config.objective.maskTokenId).toBe(257);
    expect(r.config.model).toMatchObject({ vocabSize: 264, dModel: C.d, nHeads: C.heads, nKvHeads: C.kvHeads, ffnHidden: C.hidden });
    const out = join(root, 'ft');
    const t = mdlm('train', '--init-from', dir, '--data.path', join(root, 'corpus.txt'), '--data.tokenizer', 'byte', '--steps', '1', '--train.lr', '1e-6', '--train.minLr', '1e-7', '--backend', 'cpu', '--out', out,
      '--train.batchSize', '2', '--train.evalBatches', '1', '--data.valFraction', '0.2');
    expect(t.code, t.stderr).toBe(0);
    expect(t.stderr).toContain(`initialised parameters from ${dir}`);
    const trained = loadModel(join(out, 'step-0000001'));
    expect(trained.mdlm).toMatchObject({ objective: 'mdlm', mask_token_id: 257 });
    const wte = tensors['model.transformer.wte.weight']!.data;
    const moved = trained.tensors.embed!.reduce((a, v, i) => Math.max(a, Math.abs(v - wte[i]!)), 0);
    expect(moved).toBeLessThan(1e-4);
    // mdlm sample runs it as masked diffusion: every [MASK] (257) of the canvas is filled.
    const sample = mdlm('sample', '--checkpoint', dir, '--tokenizer', 'byte', '--length', '8', '--steps', '4', '--backend', 'cpu');
    expect(sample.code, sample.stderr).toBe(0);
    expect(sample.stdout).not.toContain('[MASK]');
    expect(sample.stdout).not.toContain('░');
    expect(sample.stdout.length).toBeGreaterThan(0);
  }, 120_000);

  it('a trained mdlm checkpoint exported as LLaDA reads back with the same bits, run config and mask id, and evaluates to the same ELBO', () => {
    const out = join(root, 'run');
    const t = mdlm('train', '--preset', 'nano', '--data.path', join(root, 'corpus.txt'), '--steps', '2', '--backend', 'cpu', '--out', out,
      '--train.batchSize', '2', '--train.evalBatches', '1', '--data.valFraction', '0.2', '--model.seqLen', '32');
    expect(t.code, t.stderr).toBe(0);
    const ck = join(out, 'step-0000002');
    const exported = join(root, 'run-llada');
    const e = mdlm('model', 'export', '--model', ck, '--out', exported, '--format', 'llada');
    expect(e.code, e.stderr).toBe(0);
    expect(readdirSync(exported)).toEqual(expect.arrayContaining(['config.json', 'model.safetensors', 'tokenizer_config.json']));
    const a = loadModel(ck);
    const b = loadModel(exported);
    expect(JSON.parse(readFileSync(join(exported, 'config.json'), 'utf8'))).toMatchObject({ model_type: 'llada', mask_token_id: 257 });
    expect(b.model).toEqual(a.model);
    expect(b.config).toEqual(a.config);
    for (const [k, v] of Object.entries(a.tensors)) expect(b.tensors[k], k).toEqual(v);
    const elbo = (dir: string) => JSON.parse(mdlm('eval', '--model', dir, '--data', join(root, 'corpus.txt'), '--backend', 'cpu', '--batches', '2', '--json').stdout) as { loss: number };
    expect(elbo(exported).loss).toBe(elbo(ck).loss);
  }, 120_000);
});
