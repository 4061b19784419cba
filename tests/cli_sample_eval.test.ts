/**
 * `mdlm eval` and `mdlm sample` as a user runs them, on tiny checkpoints trained here (one AR, one
 * mdlm), checked against the library they wrap: the trainer's eval, the samplers, a forward pass.
 */
import { cpSync, mkdtempSync, readFileSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CpuBackend } from '../src/backend/cpu/cpu.js';
import { loadModel } from '../src/checkpoint/checkpoint.js';
import { TextStream } from '../src/cli/sample.js';
import { readSafetensors } from '../src/checkpoint/safetensors.js';
import { resolveConfig } from '../src/config/load.js';
import { ByteTokenizer } from '../src/data/byte.js';
import { prepareData } from '../src/data/prepare.js';
import { ArrayTokenSource } from '../src/data/source.js';
import { LlamaModel } from '../src/model/llama.js';
import { modelLogits } from '../src/model/logits.js';
import { ArObjective } from '../src/objectives/ar.js';
import { sampleAr, sampleDiffusion } from '../src/sampling/index.js';
import { openRunData } from '../src/train/data.js';
import { evaluateModel } from '../src/train/evaluate.js';
import { Trainer } from '../src/train/trainer.js';
import { mdlm } from './support/cli.js';

let root: string;
const run = (kind: 'ar' | 'mdlm') => join(root, `run-${kind}`);
const text = () => join(root, 'corpus.txt');
const tok = ByteTokenizer.create();

/** Documents of made-up sentences, separated by blank lines. */
function corpus(): string {
  const words = ['the', 'cat', 'sat', 'on', 'a', 'mat', 'and', 'dog', 'ran', 'to', 'house', 'by', 'river'];
  const docs: string[] = [];
  for (let d = 0; d < 30; d++) {
    const w: string[] = [];
    for (let i = 0; i < 40; i++) w.push(words[(d * 7 + i * i * 3 + i) % words.length]!);
    docs.push(`${w.join(' ')}.`);
  }
  return docs.join('\n\n') + '\n';
}

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), 'mdlm-cli-'));
  writeFileSync(text(), corpus());
  const data = join(root, 'data');
  await prepareData({ input: text(), tokenizer: 'byte', out: data, valFraction: 0.3, seed: 1 });
  for (const kind of ['ar', 'mdlm'] as const) {
    const config = resolveConfig({
      preset: 'tiny',
      overrides: {
        'objective.kind': kind, 'model.dModel': '32', 'model.nLayers': '1', 'model.nHeads': '4', 'model.ffnHidden': '64', 'model.seqLen': '32',
        'train.batchSize': '4', 'train.steps': '2', 'train.warmupSteps': '1', 'train.evalEvery': '0', 'train.evalBatches': '3', 'train.saveEvery': '0',
        'data.path': data, out: run(kind), backend: 'cpu',
      },
    });
    const d = await openRunData(config, () => {});
    const t = new Trainer({ config, backend: new CpuBackend(), train: d.train, val: d.val, tokenizer: d.tokenizer, resume: false, log: () => {} });
    await t.run();
    t.destroy();
  }
});

afterAll(() => rmSync(root, { recursive: true, force: true }));

function lastValLoss(kind: 'ar' | 'mdlm'): number {
  const lines = readFileSync(join(run(kind), 'metrics.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l) as Record<string, number>);
  return lines.filter((l) => 'val_loss' in l).at(-1)!.val_loss!;
}

function expectUserError(r: { code: number; stderr: string }, code: string, message: RegExp): void {
  expect(r.code).toBe(1);
  expect(r.stderr).toMatch(new RegExp(`mdlm: ${code}: `));
  expect(r.stderr).toMatch(message);
  expect(r.stderr).not.toContain('    at ');
}

describe('mdlm eval', () => {
  for (const kind of ['ar', 'mdlm'] as const) {
    it(`--json on the run's prepared data reproduces the trainer's validation loss (${kind})`, () => {
      const r = mdlm('eval', '--model', run(kind), '--data', join(root, 'data'), '--batches', '3', '--backend', 'cpu', '--json');
      expect(r.code, r.stderr).toBe(0);
      const lines = r.stdout.trim().split('\n');
      expect(lines).toHaveLength(1);
      const j = JSON.parse(lines[0]!) as { loss: number; ppl: number; tokens: number; objective: string; noise_levels: number; batches: number };
      expect(j.objective).toBe(kind);
      expect(j.batches).toBe(3);
      expect(j.noise_levels).toBe(kind === 'mdlm' ? 8 : 1);
      expect(Math.abs(j.loss - lastValLoss(kind))).toBeLessThan(1e-6);
      expect(j.ppl).toBeCloseTo(Math.exp(j.loss), 6);
      expect(j.tokens).toBeLessThanOrEqual(3 * 4 * 32);
      expect(j.tokens).toBeGreaterThan(3 * 4 * 32 * 0.9);
    });
  }

  it('on a text file: its documents, each ended by EOS, scored like any token source', async () => {
    const r = mdlm('eval', '--model', run('ar'), '--data', text(), '--seq-len', '16', '--batch-size', '5', '--batches', 'all', '--backend', 'cpu', '--json');
    expect(r.code, r.stderr).toBe(0);
    const j = JSON.parse(r.stdout) as { loss: number; tokens: number; batches: number };
    const ids = corpus().trim().split('\n\n').flatMap((doc) => [...tok.encode(doc), tok.eosId]);
    const source = new ArrayTokenSource('corpus', Int32Array.from(ids), tok.vocabSize, tok.eosId);
    const loaded = loadModel(join(run('ar'), 'step-0000002'));
    const model = new LlamaModel(new CpuBackend(), { ...loaded.model, seqLen: 16 }, 5, 0);
    model.loadParams(loaded.tensors, 'test');
    const e = await evaluateModel(model, new ArObjective(), source, { seqLen: 16, batchSize: 5, mode: 'packed' });
    model.destroy();
    expect(j.batches).toBe(Math.floor((ids.length - 1) / 16 / 5));
    expect(j.tokens).toBe(e.tokens);
    expect(j.loss).toBeCloseTo(e.loss, 6);
  });

  it('--save-logits writes ids and logits of one forward: causal for ar, bidirectional for mdlm', async () => {
    const ids = [116, 104, 101, 32, 99, 97, 116, 256];
    const changed = [...ids.slice(0, 4), 100, 111, 103, 256]; // same first 4 ids
    for (const kind of ['ar', 'mdlm'] as const) {
      const save = (list: number[], file: string) => {
        const r = mdlm('eval', '--model', run(kind), '--save-logits', file, '--ids', list.join(','), '--backend', 'cpu');
        expect(r.code, r.stderr).toBe(0);
        return readSafetensors(file).tensors;
      };
      const a = save(ids, join(root, `${kind}-a.safetensors`));
      const b = save(changed, join(root, `${kind}-b.safetensors`));
      expect(a.ids).toMatchObject({ dtype: 'I32', shape: [8] });
      expect(Array.from(a.ids!.data as Int32Array)).toEqual(ids);
      expect(a.logits).toMatchObject({ dtype: 'F32', shape: [8, 264] });
      // The same forward in-process.
      const loaded = loadModel(join(run(kind), 'step-0000002'));
      const model = new LlamaModel(new CpuBackend(), { ...loaded.model, seqLen: 8 }, 1, 0);
      model.loadParams(loaded.tensors, 'test');
      expect(a.logits!.data).toEqual(await modelLogits(model, kind === 'ar')(Int32Array.from(ids), 1, 8));
      model.destroy();
      const prefix = (t: typeof a) => (t.logits!.data as Float32Array).slice(0, 4 * 264);
      if (kind === 'ar') expect(prefix(b)).toEqual(prefix(a));
      else expect(prefix(b)).not.toEqual(prefix(a));
    }
  });

  it('user mistakes are clear errors', () => {
    const m = run('ar');
    expectUserError(mdlm('eval', '--model', m), 'BAD_ARGUMENT', /nothing to do/);
    expectUserError(mdlm('eval', '--model', join(root, 'nope'), '--data', text()), 'NOT_FOUND', /does not exist/);
    expectUserError(mdlm('eval', '--model', m, '--save-logits', join(root, 'x.safetensors'), '--ids', '1,999'), 'BAD_ARGUMENT', /--ids: "999" is not a token id in \[0, 264\)/);
    expectUserError(mdlm('eval', '--model', m, '--save-logits', join(root, 'x.safetensors')), 'BAD_ARGUMENT', /exactly one of --ids/);
    expectUserError(mdlm('eval', '--model', m, '--save-logits', join(root, 'x.safetensors'), '--ids', Array(40).fill(1).join(',')), 'BAD_ARGUMENT', /40 tokens exceed the model's context of 32/);
    expectUserError(mdlm('eval', '--model', m, '--data', text(), '--seq-len', '64'), 'BAD_ARGUMENT', /--seq-len 64 exceeds the model's context of 32/);
    expectUserError(mdlm('eval', '--model', m, '--data', text(), '--batches', '0'), 'BAD_ARGUMENT', /--batches: expected an integer ≥ 1/);
    // A checkpoint whose weights were cut short is refused, not half-read.
    const broken = join(root, 'broken');
    cpSync(join(m, 'step-0000002'), broken, { recursive: true });
    truncateSync(join(broken, 'model.safetensors'), 1000);
    expectUserError(mdlm('eval', '--model', broken, '--data', text()), 'BAD_FILE', /model\.safetensors is 1000 bytes/);
  });

  it('--save-logits to a path that cannot take the file is one line naming it, before the model runs', () => {
    const m = run('ar');
    const save = (path: string) => mdlm('eval', '--model', m, '--save-logits', path, '--ids', '1,2,3', '--backend', 'cpu');
    const expectIoError = (r: { code: number; stderr: string }, message: string) => {
      expect(r.code).toBe(1);
      expect(r.stderr.trim()).toBe(`mdlm: IO_ERROR: ${message}`);
    };
    expectIoError(save(root), `cannot write ${root}: it is a directory (EISDIR); pass another --save-logits naming a file`);
    expectIoError(save(join(text(), 'x.safetensors')), `cannot write ${join(text(), 'x.safetensors')}: ${text()} is a file, not a directory (ENOTDIR); pass another --save-logits`);
    expectIoError(save('/proc/mdlm-logits.safetensors'), 'cannot write /proc/mdlm-logits.safetensors: /proc does not take new entries (not a regular file system) (ENOENT); pass another --save-logits on a regular file system');
    expect(mdlm('eval', '--model', m, '--save-logits', join(root, 'missing', 'x.safetensors'), '--ids', '1').stderr).toMatch(/^mdlm: IO_ERROR: cannot write .*missing\/x\.safetensors: no such file or directory \(ENOENT\); check the path or pass another --save-logits\n$/);
  });
});

/** The checkpoint's model at `seqLen`, batch 1, as a sampler's logits function. */
function logitsOf(kind: 'ar' | 'mdlm', seqLen: number) {
  const loaded = loadModel(join(run(kind), 'step-0000002'));
  const model = new LlamaModel(new CpuBackend(), { ...loaded.model, seqLen }, 1, 0);
  model.loadParams(loaded.tensors, 'test');
  return { logits: modelLogits(model, kind === 'ar'), maskId: loaded.mdlm!.mask_token_id, done: () => model.destroy() };
}

describe('mdlm sample', () => {
  it('ar: streams the continuation the AR sampler draws (prompt, seed, temperature, top-k, EOS)', async () => {
    const prompt = 'the ';
    const r = mdlm('sample', '--checkpoint', run('ar'), '--prompt', prompt, '--max-new-tokens', '12', '--temperature', '0.9', '--top-k', '20', '--seed', '5', '--num-samples', '2', '--backend', 'cpu');
    expect(r.code, r.stderr).toBe(0);
    const ids = tok.encode(prompt);
    const expected: string[] = [];
    for (const seed of [5, 6]) {
      const m = logitsOf('ar', ids.length + 12);
      const gen = await sampleAr({ logits: m.logits, prompt: ids, maxNewTokens: 12, seqLen: ids.length + 12, vocab: 264, temperature: 0.9, topK: 20, topP: 1, eosId: tok.eosId, seed });
      m.done();
      expected.push(prompt + tok.decode(gen.filter((id) => id !== tok.eosId)));
    }
    expect(r.stdout).toBe(`── sample 1/2 (seed 5) ──\n${expected[0]}\n\n── sample 2/2 (seed 6) ──\n${expected[1]}\n`);
  });

  it('mdlm: prints the text the diffusion sampler unmasks, block by block, up to EOS', async () => {
    const prompt = 'a cat ';
    const args = ['--length', '16', '--steps', '8', '--block-length', '8', '--temperature', '0.7', '--remasking', 'random', '--seed', '2'];
    const r = mdlm('sample', '--checkpoint', run('mdlm'), '--prompt', prompt, ...args, '--backend', 'cpu');
    expect(r.code, r.stderr).toBe(0);
    const ids = tok.encode(prompt);
    const m = logitsOf('mdlm', ids.length + 16);
    const out = await sampleDiffusion({
      logits: m.logits, prompt: ids, genLength: 16, steps: 8, blockLength: 8, maskId: m.maskId!, vocab: 264, temperature: 0.7, remasking: 'random', seqLen: ids.length + 16, seed: 2,
    });
    m.done();
    const gen = Array.from(out.subarray(ids.length));
    const end = gen.indexOf(tok.eosId);
    expect(r.stdout).toBe(`${prompt}${tok.decode(end < 0 ? gen : gen.slice(0, end))}\n`);
    expect(r.stdout).not.toContain('[MASK]'); // none left unmasked
  });

  it('streamed text never splits a character: bytes of one UTF-8 character wait for each other', () => {
    const s = new TextStream(tok);
    expect(s.push(tok.encode('a'))).toBe('a');
    const [c3, a9] = tok.encode('é');
    expect(s.push([c3!])).toBe('');
    expect(s.push([a9!, 98])).toBe('éb');
    expect(s.push([0xe2])).toBe('');
    expect(s.flush()).toBe('\uFFFD'); // an unfinished character is shown at the end
  });

  it('user mistakes are clear errors', () => {
    expectUserError(mdlm('sample', '--checkpoint', run('mdlm'), '--steps', '0'), 'BAD_ARGUMENT', /--steps: expected an integer ≥ 1, got "0"/);
    expectUserError(mdlm('sample', '--checkpoint', run('mdlm'), '--length', '16', '--block-length', '4', '--steps', '6'), 'BAD_ARGUMENT', /--steps 6 must be a multiple of the number of blocks/);
    expectUserError(mdlm('sample', '--checkpoint', run('mdlm'), '--length', '16', '--block-length', '5'), 'BAD_ARGUMENT', /--block-length 5 must divide --length 16/);
    expectUserError(mdlm('sample', '--checkpoint', run('mdlm'), '--prompt', 'x'.repeat(20), '--length', '16'), 'BAD_ARGUMENT', /\+ --length 16 = 36 exceeds the model's context of 32/);
    expectUserError(mdlm('sample', '--checkpoint', run('ar'), '--prompt', 'x'.repeat(40)), 'BAD_ARGUMENT', /--prompt is 40 tokens, longer than the model's context of 32/);
    expectUserError(mdlm('sample', '--checkpoint', run('mdlm'), '--top-p', '0.9'), 'BAD_ARGUMENT', /--top-p applies to ar checkpoints/);
    expectUserError(mdlm('sample', '--checkpoint', run('ar'), '--remasking', 'random'), 'BAD_ARGUMENT', /--remasking applies to mdlm/);
    expectUserError(mdlm('sample', '--checkpoint', run('ar'), '--top-p', '0'), 'BAD_ARGUMENT', /--top-p: expected a number in \(0, 1\]/);
    expectUserError(mdlm('sample', '--checkpoint', join(root, 'data')), 'NOT_FOUND', /no config\.json and no step-\* checkpoint/);
  });
});
