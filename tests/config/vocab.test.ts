/**
 * The model's vocabulary follows the data's tokenizer unless model.vocabSize is set; the [MASK]
 * is the tokenizer's (added as the next free id only for masked diffusion); an --init-from
 * checkpoint's config.json gives the model.
 */
import { describe, expect, test } from 'vitest';
import { type InitModel, resolveConfig } from '../../src/config/load.js';
import type { ModelConfig } from '../../src/config/schema.js';
import { paddedVocabSize, vocabularyNeeds } from '../../src/config/vocab.js';
import { badConfig } from '../support/config.js';


describe('model.vocabSize follows the tokenizer', () => {
  test('GPT-2 data with a byte-level preset needs no --model.vocabSize', () => {
    for (const preset of ['nano', 'small']) {
      const mdlm = resolveConfig({ preset, overrides: { 'data.tokenizer': 'gpt2' } });
      expect([mdlm.model.vocabSize, mdlm.objective.maskTokenId]).toEqual([50304, 50257]);
      expect(resolveConfig({ preset, overrides: { 'data.tokenizer': 'gpt2', 'objective.kind': 'ar' } }).model.vocabSize).toBe(50304);
    }
  });

  test('the presets keep their sizes: 264 with byte (its [MASK] 257), 50304 with gpt2, whichever preset', () => {
    for (const preset of ['nano', 'tiny', 'small']) expect(resolveConfig({ preset }).model.vocabSize).toBe(264);
    const big = resolveConfig({ preset: 'llama-124m' });
    expect([big.model.vocabSize, big.objective.maskTokenId]).toEqual([50304, 50257]);
    const byte = resolveConfig({ preset: 'llama-124m', overrides: { 'data.tokenizer': 'byte' } });
    expect([byte.model.vocabSize, byte.objective.maskTokenId]).toEqual([264, 257]);
    expect(resolveConfig({}).model.vocabSize).toBe(264);
  });

  test('a loaded tokenizer: its ids, + [MASK] for mdlm where it has none, padded to 64 (8 up to 512 ids)', () => {
    const hf = { name: 'hf:tok', vocabSize: 1021 };
    expect(resolveConfig({ tokenizer: hf, overrides: { 'objective.kind': 'ar' } }).model.vocabSize).toBe(1024);
    const m = resolveConfig({ tokenizer: hf });
    expect([m.model.vocabSize, m.objective.maskTokenId]).toEqual([1024, 1021]);
    const full = resolveConfig({ tokenizer: { name: 'hf:tok', vocabSize: 1024 } });
    expect([full.model.vocabSize, full.objective.maskTokenId]).toEqual([1088, 1024]);
    const own = resolveConfig({ tokenizer: { name: 'hf:tok', vocabSize: 1024, maskId: 3 } });
    expect([own.model.vocabSize, own.objective.maskTokenId]).toEqual([1024, 3]);
    expect(resolveConfig({ tokenizer: { name: 'hf:tiny', vocabSize: 7 } }).model.vocabSize).toBe(8);
    expect([paddedVocabSize(259), paddedVocabSize(512), paddedVocabSize(513), paddedVocabSize(50258)]).toEqual([264, 512, 576, 50304]);
    expect(vocabularyNeeds({ name: 'gpt2', vocabSize: 50257 }, 'ar')).toEqual({ ids: 50257, maskId: undefined, maskAdded: false });
  });

  test('an explicit model.vocabSize wins and must hold the tokenizer; a tokenizer.json without a loaded size needs one', () => {
    expect(resolveConfig({ overrides: { 'data.tokenizer': 'gpt2', 'model.vocabSize': '50400' } }).model.vocabSize).toBe(50400);
    expect(badConfig(() => resolveConfig({ tokenizer: { name: 'hf:t', vocabSize: 1000 }, overrides: { 'model.vocabSize': '1000' } }))).toMatch(/model\.vocabSize \(1000\) is too small for the hf:t tokenizer: it needs at least 1001 ids/);
    expect(badConfig(() => resolveConfig({ overrides: { 'data.tokenizer': 'some/tokenizer.json' } }))).toMatch(/model\.vocabSize: .*known once it is loaded/);
    expect(resolveConfig({ overrides: { 'data.tokenizer': 'some/tokenizer.json', 'model.vocabSize': '512' } }).model.vocabSize).toBe(512);
  });

  test('says how the vocabulary was derived, once', () => {
    const lines: string[] = [];
    resolveConfig({ preset: 'nano', overrides: { 'data.tokenizer': 'gpt2' }, log: (l) => lines.push(l) });
    expect(lines).toEqual(["vocabulary: model.vocabSize 50304, the gpt2 tokenizer's 50257 ids and the [MASK] masked diffusion adds as id 50257 rounded up to a multiple of 64 (set model.vocabSize to choose)"]);
    lines.length = 0;
    resolveConfig({ overrides: { 'model.vocabSize': '300' }, log: (l) => lines.push(l) });
    expect(lines).toEqual([]);
  });
});

describe('--init-from: the model from the checkpoint', () => {
  const qwen: ModelConfig = {
    vocabSize: 1000, dModel: 64, nLayers: 3, nHeads: 4, nKvHeads: 2, ffnHidden: 160, seqLen: 4096, ropeTheta: 1e6, normEps: 1e-6,
    qkNorm: false, qkvBias: true, tieEmbeddings: true, initStd: 0.02,
  };
  const init: InitModel = { model: qwen, source: 'ck/config.json', tokenizer: 'ck' };
  const tok = { name: 'hf:ck', vocabSize: 1000 };

  test('every architecture field comes from config.json, the preset gives the training windows (at most the context)', () => {
    const c = resolveConfig({ preset: 'nano', initFrom: init, tokenizer: tok, overrides: { 'objective.kind': 'ar' } });
    expect(c.model).toEqual({ ...qwen, seqLen: 64 });
    expect(c.data.tokenizer).toBe('ck');
    expect(resolveConfig({ preset: 'nano', initFrom: { ...init, model: { ...qwen, seqLen: 32 } }, tokenizer: tok, overrides: { 'objective.kind': 'ar' } }).model.seqLen).toBe(32);
    expect(resolveConfig({ initFrom: init, tokenizer: tok, overrides: { 'objective.kind': 'ar', 'model.seqLen': '8192', 'model.nLayers': '3' } }).model.seqLen).toBe(8192);
  });

  test('a flag or file that contradicts it is one error naming both values', () => {
    const msg = badConfig(() => resolveConfig({ preset: 'nano', initFrom: init, tokenizer: tok, overrides: { 'model.nLayers': '6', 'model.qkvBias': 'false', 'objective.kind': 'ar' } }));
    expect(msg).toBe('--init-from takes the model from the checkpoint: model.nLayers is 6 (from --model.nLayers) but 3 in ck/config.json; model.qkvBias is false (from --model.qkvBias) but true in ck/config.json; drop those settings or choose another checkpoint');
    expect(badConfig(() => resolveConfig({ initFrom: init, tokenizer: tok, overrides: { 'model.vocabSize': '999' } }))).toMatch(/model\.vocabSize is 999 .* but 1000 in ck\/config\.json/);
    expect(resolveConfig({ initFrom: init, tokenizer: tok, overrides: { 'model.vocabSize': '1088' } }).model.vocabSize).toBe(1088);
  });

  test('masked diffusion grows the vocabulary for a [MASK] the tokenizer and the checkpoint lack; ar keeps it', () => {
    expect(resolveConfig({ initFrom: init, tokenizer: tok, overrides: { 'objective.kind': 'ar' } }).model.vocabSize).toBe(1000);
    const m = resolveConfig({ initFrom: init, tokenizer: tok });
    expect([m.model.vocabSize, m.objective.maskTokenId]).toEqual([1024, 1000]);
    // A checkpoint with spare rows (Qwen's padded embedding) holds the [MASK] as it is.
    const roomy = resolveConfig({ initFrom: { ...init, model: { ...qwen, vocabSize: 1024 } }, tokenizer: tok });
    expect([roomy.model.vocabSize, roomy.objective.maskTokenId]).toEqual([1024, 1000]);
    // A diffusion checkpoint's own [MASK].
    const diffusion = resolveConfig({ initFrom: { ...init, maskTokenId: 999 }, tokenizer: { ...tok, maskId: 999 } });
    expect([diffusion.model.vocabSize, diffusion.objective.maskTokenId]).toEqual([1000, 999]);
    // A tokenizer larger than the model is the wrong one.
    expect(badConfig(() => resolveConfig({ initFrom: init, tokenizer: { name: 'gpt2', vocabSize: 50257 }, overrides: { 'objective.kind': 'ar' } }))).toMatch(/model\.vocabSize \(1000\) is too small for the gpt2 tokenizer.*from ck\/config\.json/);
  });
});
