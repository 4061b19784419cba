import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, test } from 'vitest';
import { MdlmError } from '../../src/errors.js';
import { configFields, resolveConfig } from '../../src/config/load.js';
import { PRESETS } from '../../src/config/presets.js';
import { defaultFfnHidden, TrainConfigSchema } from '../../src/config/schema.js';
import { CpuBackend } from '../../src/backend/cpu/cpu.js';
import { WebGpuBackend } from '../../src/backend/webgpu/webgpu.js';
import { defaultPreset } from '../../src/cli/train.js';
import { webgpuBackend } from '../support/webgpu.js';
import { flopsBreakdown, flopsPerToken, paramCount } from '../../src/config/model-size.js';
import { badConfig } from '../support/config.js';

const dir = mkdtempSync(join(tmpdir(), 'mdlm-config-'));
function file(name: string, text: string): string {
  const p = join(dir, name);
  writeFileSync(p, text);
  return p;
}

describe('schema', () => {
  test('empty input gives the small preset with derived defaults', () => {
    const c = resolveConfig({});
    expect(c.model).toMatchObject({ vocabSize: 264, dModel: 384, nLayers: 6, nHeads: 6, nKvHeads: 6, ffnHidden: 1024, seqLen: 256, ropeTheta: 10000, normEps: 1e-5, qkNorm: false, tieEmbeddings: true, initStd: 0.02 });
    expect(c.objective).toMatchObject({ kind: 'mdlm', schedule: 'linear', tMin: 1e-3, tMax: 1, antithetic: true, weighting: 'elbo', varilenProb: 0, evalNoiseLevels: 8, maskTokenId: 257 }); // the byte tokenizer's [MASK]
    expect(c.data).toMatchObject({ tokenizer: 'byte', mode: 'packed' });
    expect(c.data.path).toBeUndefined();
    expect(c.backend).toBe('auto');
    expect(resolveConfig({ preset: 'small' })).toEqual(c);
  });

  test('defaultFfnHidden follows Llama sizing rounded to 64', () => {
    expect(defaultFfnHidden(768)).toBe(2048);
    expect(defaultFfnHidden(2048)).toBe(5504);
  });

  test('every field has a description; non-optional fields a default', () => {
    const fields = configFields();
    expect(fields.length).toBeGreaterThan(45);
    for (const f of fields) {
      expect(f.description.length, f.path).toBeGreaterThan(5);
      if (!f.optional) expect(f.default, f.path).not.toBeUndefined();
    }
    const byPath = new Map(fields.map((f) => [f.path, f]));
    expect(byPath.get('objective.schedule')).toMatchObject({ type: 'enum', values: ['linear', 'cosine', 'polynomial', 'loglinear'], default: 'linear' });
    expect(byPath.get('train.steps')).toMatchObject({ type: 'integer', min: 1 });
    expect(byPath.get('train.lr')).toMatchObject({ type: 'number', min: 0, minInclusive: false });
    expect(byPath.get('model.qkNorm')).toMatchObject({ type: 'boolean', default: false });
    expect(byPath.get('data.path')).toMatchObject({ type: 'string', optional: true });
    expect(byPath.get('backend')).toMatchObject({ type: 'enum', default: 'auto' });
    // The raw defaults agree with what parsing an empty config produces.
    const parsed = TrainConfigSchema.parse({}) as Record<string, any>;
    for (const f of fields) {
      if (f.optional) continue;
      expect(f.path.split('.').reduce((v, k) => v[k], parsed), f.path).toEqual(f.default);
    }
  });
});

describe('presets and sizes', () => {
  test('parameter counts are what the presets promise', () => {
    const n = (p: keyof typeof PRESETS) => paramCount(resolveConfig({ preset: p }).model);
    // 264·64 + 2·(4·64² + 3·64·192 + 2·64) + 64
    expect(n('nano')).toBe(264 * 64 + 2 * (4 * 64 * 64 + 3 * 64 * 192 + 2 * 64) + 64);
    expect(n('tiny')).toBeGreaterThan(0.8e6);
    expect(n('tiny')).toBeLessThan(1.3e6);
    expect(n('small')).toBeGreaterThan(9e6);
    expect(n('small')).toBeLessThan(12e6);
    // 50304·768 + 12·(4·768² + 3·768·2048 + 2·768) + 768
    expect(n('llama-124m')).toBe(50304 * 768 + 12 * (4 * 768 * 768 + 3 * 768 * 2048 + 2 * 768) + 768);
    expect(n('llama-1.3b')).toBeGreaterThan(1.3e9);
    expect(n('llama-1.3b')).toBeLessThan(1.35e9);
    const big = resolveConfig({ preset: 'llama-1.3b' });
    expect(big.model).toMatchObject({ dModel: 2048, nLayers: 24, nHeads: 16, ffnHidden: 5504, seqLen: 2048, vocabSize: 50304 });
    expect(big.data.tokenizer).toBe('gpt2');
  });

  test('GQA, untied head, biases and qk-norm change the count as expected', () => {
    const base = resolveConfig({ preset: 'tiny' }).model;
    const d = base.dModel, hd = d / base.nHeads;
    expect(paramCount({ ...base, tieEmbeddings: false }) - paramCount(base)).toBe(base.vocabSize * d);
    expect(paramCount(base) - paramCount({ ...base, nKvHeads: 2 })).toBe(base.nLayers * 2 * d * (base.nHeads - 2) * hd);
    expect(paramCount({ ...base, qkvBias: true }) - paramCount(base)).toBe(base.nLayers * 3 * d);
    expect(paramCount({ ...base, qkNorm: true }) - paramCount(base)).toBe(base.nLayers * 2 * hd);
  });

  test('FLOPs: 6N + 12·L·d·T, causal attention halved unless asked otherwise', () => {
    const m = resolveConfig({ preset: 'llama-124m' }).model;
    const N = 12 * (4 * 768 * 768 + 3 * 768 * 2048) + 50304 * 768;
    const att = 12 * 12 * 768 * 1024;
    expect(flopsPerToken(m, 1024, 'mdlm')).toBe(6 * N + att);
    expect(flopsPerToken(m, 1024, 'ar')).toBe(6 * N + att / 2);
    expect(flopsPerToken(m, 1024, { kind: 'ar' }, { causalAttention: 'full' })).toBe(6 * N + att);
    expect(flopsBreakdown(m, 1024, 'ar').convention).toMatch(/causal/);
  });
});

describe('resolveConfig layering', () => {
  test('preset, then YAML file, then flags; flags coerced to the field type', () => {
    const f = file('a.yaml', 'model:\n  dModel: 256\n  nHeads: 8\ntrain:\n  lr: 3e-4\nobjective:\n  kind: ar\n');
    const c = resolveConfig({ preset: 'tiny', file: f, overrides: { '--model.nLayers': '7', 'model.qkNorm': 'true', 'objective.schedule': 'cosine', 'train.seed': '42', 'data.path': 'corpus.txt' } });
    expect(c.model).toMatchObject({ dModel: 256, nHeads: 8, nLayers: 7, qkNorm: true, seqLen: 128, ffnHidden: 512 });
    expect(c.train.lr).toBe(3e-4);
    expect(c.train.seed).toBe(42);
    expect(c.objective.kind).toBe('ar');
    expect(c.objective.schedule).toBe('cosine');
    expect(c.data.path).toBe('corpus.txt');
  });

  test('JSON files work; an empty YAML file is an empty config', () => {
    const c = resolveConfig({ file: file('b.json', JSON.stringify({ train: { steps: 10 }, backend: 'cpu' })) });
    expect(c.train.steps).toBe(10);
    expect(c.backend).toBe('cpu');
    expect(resolveConfig({ file: file('empty.yaml', '') }).model.dModel).toBe(384);
  });

  test('bad values name the field, the value, its origin and what is allowed', () => {
    const m = badConfig(() => resolveConfig({ overrides: { 'model.dModel': 'abc', 'objective.schedule': 'cosin', 'train.steps': '1.5', 'model.qkNorm': 'maybe' } }));
    expect(m).toContain('model.dModel: got "abc" (from --model.dModel), expected an integer >= 1');
    expect(m).toContain('objective.schedule: got "cosin"');
    expect(m).toContain('one of linear, cosine, polynomial, loglinear (did you mean "cosine"?)');
    expect(m).toContain('train.steps: got 1.5');
    expect(m).toContain('model.qkNorm: got "maybe"');
    expect(m).not.toContain('"code"'); // no raw zod JSON
    const f = file('bad.yaml', 'train:\n  beta2: 1.5\n');
    expect(badConfig(() => resolveConfig({ file: f }))).toContain(`train.beta2: got 1.5 (from file ${f}), expected a number in [0, 1)`);
  });

  test('unknown keys are errors with suggestions', () => {
    expect(badConfig(() => resolveConfig({ overrides: { 'model.dmodel': '3' } }))).toContain('did you mean "model.dModel"?');
    expect(badConfig(() => resolveConfig({ overrides: { 'nope.x': '3' } }))).toContain("unknown config field '--nope.x'");
    const m = badConfig(() => resolveConfig({ file: file('c.yaml', 'model:\n  nlayers: 3\ntrian:\n  steps: 3\n') }));
    expect(m).toContain('model.nlayers: unknown key');
    expect(m).toContain('did you mean "nLayers"?');
    expect(m).toContain('trian: unknown key');
    expect(m).toContain('did you mean "train"?');
    expect(badConfig(() => resolveConfig({ preset: 'tiy' }))).toContain('did you mean "tiny"?');
  });

  test('cross-field checks name the field', () => {
    expect(badConfig(() => resolveConfig({ overrides: { 'model.nHeads': '5' } }))).toMatch(/model\.nHeads \(5\) must divide model\.dModel \(384\)/);
    expect(badConfig(() => resolveConfig({ overrides: { 'model.nKvHeads': '4' } }))).toMatch(/model\.nKvHeads \(4\) must divide model\.nHeads \(6\)/);
    expect(badConfig(() => resolveConfig({ overrides: { 'model.qkvBias': 'true', 'model.qkNorm': 'true' } }))).toMatch(/model\.qkNorm: .*no Hugging Face architecture/);
    expect(resolveConfig({ overrides: { 'model.qkNorm': 'true' } }).model.qkNorm).toBe(true);
    expect(badConfig(() => resolveConfig({ overrides: { 'model.dModel': '36', 'model.nHeads': '12' } }))).toMatch(/head dimension .* = 3 must be even for RoPE/);
    expect(badConfig(() => resolveConfig({ overrides: { 'objective.tMin': '0.5', 'objective.tMax': '0.4' } }))).toMatch(/objective\.tMin \(0\.5\) must be < objective\.tMax/);
    expect(badConfig(() => resolveConfig({ overrides: { 'train.minLr': '0.1' } }))).toMatch(/train\.minLr/);
    expect(badConfig(() => resolveConfig({ overrides: { 'train.warmupSteps': '5000' } }))).toMatch(/train\.warmupSteps/);
    expect(badConfig(() => resolveConfig({ overrides: { 'model.vocabSize': '258' } }))).toMatch(/model\.vocabSize \(258\) is too small for the byte tokenizer: it needs at least 259 ids/);
    expect(resolveConfig({ overrides: { 'model.vocabSize': '259', 'objective.kind': 'ar' } }).model.vocabSize).toBe(259);
    expect(badConfig(() => resolveConfig({ overrides: { 'model.vocabSize': '264', 'objective.maskTokenId': '300' } }))).toMatch(/objective\.maskTokenId \(300\) must be < model\.vocabSize/);
    expect(badConfig(() => resolveConfig({ overrides: { 'objective.maskTokenId': '65' } }))).toMatch(/objective\.maskTokenId \(65\) is a real token of the byte tokenizer/);
    expect(badConfig(() => resolveConfig({ overrides: { 'data.tokenizer': 'gpt2', 'model.vocabSize': '50257' } }))).toMatch(/too small for the gpt2 tokenizer: it needs at least 50258 ids \(its 50257 and the \[MASK\] of masked diffusion, id 50257\)/);
  });

  test('file errors: missing, bad syntax, wrong extension, not a mapping', () => {
    try {
      resolveConfig({ file: join(dir, 'missing.yaml') });
      throw new Error('no error');
    } catch (e) {
      expect((e as MdlmError).code).toBe('NOT_FOUND');
    }
    expect(badConfig(() => resolveConfig({ file: file('d.yaml', 'model: [1,\n') }))).toMatch(/not valid YAML/);
    expect(badConfig(() => resolveConfig({ file: file('e.json', '{"model": ') }))).toMatch(/not valid JSON/);
    expect(badConfig(() => resolveConfig({ file: file('f.toml', 'a=1') }))).toMatch(/\.yaml, \.yml or \.json/);
    expect(badConfig(() => resolveConfig({ file: file('g.yaml', '- 1\n- 2\n') }))).toMatch(/must hold a mapping/);
    expect(badConfig(() => resolveConfig({ file: file('h.yaml', 'model: 5\n') }))).toMatch(/model: got 5.*expected a section/);
  });
});

test('a default or preset warmup is capped at a small train.steps; an explicit one is not', () => {
  expect(resolveConfig({ preset: 'tiny', overrides: { 'train.steps': '10' } }).train.warmupSteps).toBe(10);
  expect(resolveConfig({ overrides: { 'train.steps': '10' } }).train.warmupSteps).toBe(10);
  expect(badConfig(() => resolveConfig({ overrides: { 'train.steps': '10', 'train.warmupSteps': '20' } }))).toMatch(/train\.warmupSteps \(20\) must be <= train\.steps \(10\)/);
});

describe('the default preset', () => {
  test('is nano on the CPU and on a software WebGPU adapter, small on a GPU', async () => {
    expect(defaultPreset(new CpuBackend())).toBe('nano');
    const gpu = await webgpuBackend();
    if (gpu instanceof WebGpuBackend) expect(defaultPreset(gpu)).toBe(gpu.adapter.architecture === 'software' ? 'nano' : 'small');
    else expect(gpu).toBeNull();
  });
});
