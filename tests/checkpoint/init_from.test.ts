/**
 * `--init-from` takes the model from the checkpoint's config.json; a Hugging Face model whose
 * vocabulary is exactly its tokenizer's (GPT-2's 50257, Llama 2's 32000; here a byte-level BPE of
 * 257 ids) fine-tunes, evaluates and samples under ar with its own tokenizer, and under masked
 * diffusion gets a [MASK] row, said in one line.
 */
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hfConfigFromModel, paramSpecs, toHfTensors } from '../../src/checkpoint/hf.js';
import { initParams } from '../../src/checkpoint/init_from.js';
import { readSafetensors, writeSafetensors } from '../../src/checkpoint/safetensors.js';
import { resolveRunConfig } from '../../src/config/run.js';
import type { ModelConfig } from '../../src/config/schema.js';
import { loadTokenizer } from '../../src/data/tokenizer.js';
import { BYTE_CHARS, byteLevelTokenizerJson } from '../../src/data/tokenizer_json.js';
import { mdlm } from '../support/cli.js';

/** A Qwen2-style model (q/k/v biases, untied head, GQA, rope_theta 1e6) whose 257 rows are its tokenizer's 257 ids. */
const MODEL: ModelConfig = {
  vocabSize: 257, dModel: 32, nLayers: 2, nHeads: 4, nKvHeads: 2, ffnHidden: 64, seqLen: 128, ropeTheta: 1e6, normEps: 1e-6,
  qkNorm: false, qkvBias: true, tieEmbeddings: false, initStd: 0.02,
};

let root: string;
const hfDir = () => join(root, 'hf-qwen2');
const corpus = () => join(root, 'corpus.txt');

function randomParams(m: ModelConfig): Record<string, Float32Array> {
  let s = 7;
  const rnd = () => ((s = (s * 1103515245 + 12345) >>> 0) / 2 ** 32) * 0.2 - 0.1;
  return Object.fromEntries(paramSpecs(m).map((p) => [p.name, Float32Array.from({ length: p.shape.reduce((a, b) => a * b, 1) }, rnd)]));
}

beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), 'mdlm-init-'));
  const dir = hfDir();
  // What save_pretrained and a tokenizer export leave: config.json, model.safetensors, tokenizer.json (no [MASK]).
  mkdirSync(dir);
  writeFileSync(join(dir, 'config.json'), JSON.stringify(hfConfigFromModel(MODEL, { eosTokenId: 256 })));
  writeSafetensors(join(dir, 'model.safetensors'), toHfTensors(MODEL, randomParams(MODEL)), { metadata: { format: 'pt' } });
  writeFileSync(join(dir, 'tokenizer.json'), byteLevelTokenizerJson(Object.fromEntries(BYTE_CHARS.map((c, b) => [c, b])), [], [{ id: 256, content: '<|endoftext|>' }]));
  writeFileSync(join(dir, 'tokenizer_config.json'), JSON.stringify({ tokenizer_class: 'PreTrainedTokenizerFast', eos_token: '<|endoftext|>' }));
  const words = ['the', 'cat', 'sat', 'on', 'a', 'mat', 'and', 'dog', 'ran', 'to', 'house', 'by', 'river'];
  const docs = Array.from({ length: 40 }, (_, d) => Array.from({ length: 30 }, (_, i) => words[(d * 7 + i * i * 3 + i) % words.length]).join(' ') + '.');
  writeFileSync(corpus(), docs.join('\n\n') + '\n');
});

afterAll(() => rmSync(root, { recursive: true, force: true }));

describe('the run config from the checkpoint', () => {
  it('ar: the architecture from config.json, the data tokenised by the model\'s own tokenizer, nothing added', async () => {
    const r = await resolveRunConfig({ preset: 'nano', initFrom: hfDir(), overrides: { 'objective.kind': 'ar', 'data.path': corpus(), out: join(root, 'r-ar') } });
    expect(r.config.model).toEqual({ ...MODEL, seqLen: 64 });
    expect(r.config.data.tokenizer).toBe(hfDir());
    expect([r.tokenizer.vocabSize, r.tokenizer.maskId]).toEqual([257, undefined]);
    expect(r.init!.dir).toBe(hfDir());
  });

  it('masked diffusion: a [MASK] as id 257, the embedding grown to 264 rows, each new row the mean of the old, said in one line', async () => {
    const lines: string[] = [];
    const r = await resolveRunConfig({ preset: 'nano', initFrom: hfDir(), overrides: { 'data.path': corpus(), out: join(root, 'r-mdlm') }, log: (l) => lines.push(l) });
    expect([r.config.model.vocabSize, r.config.objective.maskTokenId, r.tokenizer.maskId, r.tokenizer.vocabSize]).toEqual([264, 257, 257, 258]);
    const params = initParams(r.init!, r.config.model, (l) => lines.push(l));
    const orig = readSafetensors(join(hfDir(), 'model.safetensors')).tensors;
    const d = MODEL.dModel;
    for (const [name, hf] of [['embed', 'model.embed_tokens.weight'], ['lm_head', 'lm_head.weight']] as const) {
      const got = params[name]!;
      const src = orig[hf]!.data as Float32Array;
      expect(got.length).toBe(264 * d);
      expect(Array.from(got.subarray(0, 257 * d))).toEqual(Array.from(src));
      for (const j of [0, 5, d - 1]) {
        let mean = 0;
        for (let row = 0; row < 257; row++) mean += src[row * d + j]!;
        expect(got[257 * d + j]).toBeCloseTo(mean / 257, 6);
        expect(got[263 * d + j]).toBe(got[257 * d + j]);
      }
    }
    expect(lines).toEqual(["vocabulary: model.vocabSize 257 → 264 for the [MASK] masked diffusion needs (padded): 7 rows added to the embedding and to lm_head, each the mean of the checkpoint's 257 rows"]);
  });
});

describe('mdlm train --init-from, eval and sample with the model\'s own tokenizer', () => {
  it('fine-tunes a Hugging Face directory with no model flags; its checkpoint keeps the architecture and the tokenizer', () => {
    const out = join(root, 'ft-ar');
    const r = mdlm('train', '--init-from', hfDir(), '--data.path', corpus(), '--objective', 'ar', '--steps', '2', '--backend', 'cpu', '--out', out,
      '--train.batchSize', '2', '--train.evalBatches', '1', '--data.valFraction', '0.2');
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toContain(`initialised parameters from ${hfDir()}`);
    const ck = join(out, 'step-0000002');
    const cfg = JSON.parse(readFileSync(join(ck, 'config.json'), 'utf8')) as Record<string, unknown>;
    expect(cfg).toMatchObject({ architectures: ['Qwen2ForCausalLM'], model_type: 'qwen2', vocab_size: 257, hidden_size: 32, num_key_value_heads: 2, rope_theta: 1e6, rms_norm_eps: 1e-6, tie_word_embeddings: false });
    expect(readdirSync(ck)).toEqual(expect.arrayContaining(['tokenizer.json', 'tokenizer_config.json']));
    // A run directory initialises a run as sample and eval take it: its newest checkpoint.
    const again = mdlm('train', '--init-from', out, '--data.path', corpus(), '--objective', 'ar', '--steps', '1', '--backend', 'cpu', '--out', join(root, 'ft-again'),
      '--train.batchSize', '2', '--train.evalBatches', '1', '--data.valFraction', '0.2');
    expect(again.code, again.stderr).toBe(0);
    expect(again.stderr).toContain(`initialised parameters from ${ck}`);
  });

  it('a model flag that contradicts config.json is one line naming both values', () => {
    const r = mdlm('train', '--init-from', hfDir(), '--data.path', corpus(), '--objective', 'ar', '--model.nLayers', '4', '--backend', 'cpu', '--out', join(root, 'bad'));
    expect(r.code).not.toBe(0);
    const line = r.stderr.trim().split('\n').filter((l) => l.includes('model.nLayers'));
    expect(line).toHaveLength(1);
    expect(line[0]).toMatch(/model\.nLayers is 4 \(from --model\.nLayers\) but 2 in .*hf-qwen2\/config\.json/);
  });

  it('eval and sample run the 257-id model with its own 257-id tokenizer under ar', async () => {
    const file = join(root, 'logits.safetensors');
    const e = mdlm('eval', '--model', hfDir(), '--objective', 'ar', '--backend', 'cpu', '--save-logits', file, '--text', 'the cat sat');
    expect(e.code, e.stderr).toBe(0);
    const t = readSafetensors(file).tensors;
    expect(Array.from(t.ids!.data as Int32Array)).toEqual((await loadTokenizer(hfDir())).encode('the cat sat'));
    expect(t.logits!.shape).toEqual([11, 257]);
    const s = mdlm('sample', '--checkpoint', hfDir(), '--prompt', 'the', '--max-new-tokens', '4', '--backend', 'cpu');
    expect(s.code, s.stderr).toBe(0);
    expect(s.stdout.startsWith('the')).toBe(true);
  });
});
