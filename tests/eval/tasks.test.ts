/**
 * `mdlm eval --task` and `--gen-ppl`: the scores against a direct computation from the logits,
 * batching that changes no score, accuracy above chance of tiny ar and mdlm models trained here on
 * words of a fixed vocabulary (the task: which choice is the true next word, against scrambles of
 * its letters and other letters), generative perplexity of a trained model's samples below that of
 * random tokens, and bad task files refused naming the file and line.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CpuBackend } from '../../src/backend/cpu/cpu.js';
import { buildModel, openModel, requireTokenizer } from '../../src/cli/model.js';
import { resolveRunConfig } from '../../src/config/run.js';
import type { ModelConfig } from '../../src/config/schema.js';
import { prepareData } from '../../src/data/prepare.js';
import { sampleEntropy } from '../../src/eval/genppl.js';
import { type Candidate, logSoftmaxAt, scoreCandidates } from '../../src/eval/score.js';
import { LlamaModel } from '../../src/model/llama.js';
import { modelLogits } from '../../src/model/logits.js';
import { PhiloxStream, RngPurpose, uniformInt } from '../../src/rng/philox.js';
import { sampleDiffusion } from '../../src/sampling/diffusion.js';
import { openRunData } from '../../src/train/data.js';
import { Trainer } from '../../src/train/trainer.js';
import { mdlm } from '../support/cli.js';

const WORDS = ['apple', 'river', 'stone', 'cloud', 'green', 'house', 'light', 'sugar', 'tiger', 'music', 'paper', 'world'];
let root: string;

/** The nano preset's model settings (the byte tokenizer's vocabulary), for the random models. */
let nano: ModelConfig | undefined;

/** A random model (no training): what the direct computations need. */
function randomModel(backend: CpuBackend, batch: number): LlamaModel {
  return new LlamaModel(backend, { ...nano!, vocabSize: 40, dModel: 16, nLayers: 1, nHeads: 2, nKvHeads: 2, ffnHidden: 32, seqLen: 12, initStd: 0.5 }, batch, 3);
}

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), 'mdlm-eval-tasks-'));
  const rng = new PhiloxStream(11, RngPurpose.dataOrder);
  const pick = () => WORDS[uniformInt(rng, WORDS.length)]!;
  writeFileSync(join(root, 'words.txt'), Array.from({ length: 300 }, () => Array.from({ length: 10 }, pick).join(' ')).join('\n\n') + '\n');
  await prepareData({ input: join(root, 'words.txt'), tokenizer: 'byte', out: join(root, 'words'), valFraction: 0.05, seed: 1 });
  nano = (await resolveRunConfig({ preset: 'nano', overrides: { 'data.path': join(root, 'words') }, log: () => {} })).config.model;
}, 120_000);

afterAll(() => rmSync(root, { recursive: true, force: true }));

describe('scoring against a direct computation', () => {
  const cands: Candidate[] = [
    { context: [1, 2, 3], continuation: [4, 5] },
    { context: [7], continuation: [8, 9, 10, 11] },
    { context: [3, 3, 3, 3, 3], continuation: [6] },
    { context: [12, 13], continuation: [14, 15, 16] },
    { context: [20, 21, 22, 23], continuation: [24, 25, 26, 27, 28] },
  ];

  it('ar: the log-likelihood is the sum over the continuation of log softmax of the logits before each token, whatever the batch', async () => {
    const backend = new CpuBackend();
    const one = randomModel(backend, 1);
    const three = randomModel(backend, 3);
    const logits = modelLogits(one, true);
    const V = one.cfg.vocabSize;
    const direct: number[] = [];
    for (const c of cands) {
      const ids = Int32Array.from([...c.context, ...c.continuation]);
      const l = await logits(ids, 1, ids.length);
      direct.push(c.continuation.reduce((a, tok, j) => a + logSoftmaxAt(l, (c.context.length - 1 + j) * V, V, tok), 0));
    }
    const batched = await scoreCandidates(three, cands, { kind: 'ar' });
    batched.forEach((s, i) => {
      expect(s.logLik).toBeCloseTo(direct[i]!, 4);
      expect(s.stderr).toBe(0);
      expect(s.logLik).toBeLessThan(0);
    });
    const single = await scoreCandidates(one, cands, { kind: 'ar' });
    single.forEach((s, i) => expect(s.logLik).toBeCloseTo(batched[i]!.logLik, 4));
    one.destroy();
    three.destroy();
  });

  it('mdlm: a one-token continuation scores log p(token | context, [MASK]) exactly; longer ones average L/ℓ-weighted samples with a standard error', async () => {
    const backend = new CpuBackend();
    const model = randomModel(backend, 4);
    const maskId = 39;
    const V = model.cfg.vocabSize;
    const c = cands[2]!;
    const ids = Int32Array.from([...c.context, maskId]);
    const l = await modelLogits(model, false)(ids, 1, ids.length);
    const direct = logSoftmaxAt(l, c.context.length * V, V, c.continuation[0]!);
    const [s] = await scoreCandidates(model, [c], { kind: 'mdlm', maskId, samples: 5, seed: 1 });
    expect(s!.logLik).toBeCloseTo(direct, 4);
    expect(s!.stderr).toBe(0);
    // Several tokens: samples differ (different masks), the same seed gives the same estimate at any batch.
    const long = await scoreCandidates(model, cands, { kind: 'mdlm', maskId, samples: 6, seed: 1 });
    expect(long[4]!.stderr).toBeGreaterThan(0);
    const other = randomModel(backend, 1);
    const again = await scoreCandidates(other, cands, { kind: 'mdlm', maskId, samples: 6, seed: 1 });
    again.forEach((x, i) => expect(x.logLik).toBeCloseTo(long[i]!.logLik, 4));
    model.destroy();
    other.destroy();
  });

  it('sample entropy is the entropy of the token counts', () => {
    expect(sampleEntropy([1, 1, 1, 1])).toBe(0);
    expect(sampleEntropy([1, 2, 3, 4])).toBeCloseTo(Math.log(4), 12);
    expect(sampleEntropy([5, 5, 6, 6])).toBeCloseTo(Math.log(2), 12);
  });
});

/** Train one run as `mdlm train` resolves it. */
async function train(overrides: Record<string, string>): Promise<void> {
  const { config, tokenizer } = await resolveRunConfig({ preset: 'nano', overrides, log: () => {} });
  const data = await openRunData(config, () => {});
  const t = new Trainer({ config, backend: new CpuBackend(), train: data.train, val: data.val, tokenizer, resume: false, log: () => {} });
  try {
    await t.run();
  } finally {
    t.destroy();
  }
}

/** Items: a few words, then which of the true next word, a scramble of it and two strings of other letters follows. */
function writeTask(file: string, items: number): void {
  const rng = new PhiloxStream(5, RngPurpose.harness);
  const lines: string[] = [];
  const letters = 'bdfjkqvxyz';
  for (let i = 0; i < items; i++) {
    const context = Array.from({ length: 3 }, () => WORDS[uniformInt(rng, WORDS.length)]!).join(' ');
    const word = WORDS[uniformInt(rng, WORDS.length)]!;
    const scrambled = [...word].reverse().join('');
    const noise = () => Array.from({ length: word.length }, () => letters[uniformInt(rng, letters.length)]!).join('');
    const choices = [` ${word}`, ` ${scrambled}`, ` ${noise()}`, ` ${noise()}`];
    const gold = uniformInt(rng, 4);
    [choices[0], choices[gold]] = [choices[gold]!, choices[0]!];
    lines.push(JSON.stringify({ context, choices, gold }));
  }
  writeFileSync(file, lines.join('\n') + '\n');
}

interface TaskReport {
  task: { items: number; acc: number; acc_stderr: number; acc_norm: number; acc_norm_stderr: number; chance: number; scoring: string; elbo_samples?: number; score_stderr_mean?: number };
}

describe('trained tiny models', () => {
  const common = {
    'model.dModel': '32', 'model.nLayers': '1', 'model.nHeads': '4', 'model.ffnHidden': '96', 'model.initStd': '0.08', 'model.seqLen': '32',
    'train.batchSize': '16', 'train.lr': '1e-2', 'train.minLr': '1e-3', 'train.warmupSteps': '10',
    'train.evalEvery': '0', 'train.evalBatches': '1', 'train.saveEvery': '0', backend: 'cpu',
  };
  beforeAll(async () => {
    writeTask(join(root, 'task.jsonl'), 40);
    await train({ ...common, 'objective.kind': 'ar', 'train.steps': '150', 'data.path': join(root, 'words'), out: join(root, 'ar') });
    await train({ ...common, 'objective.kind': 'mdlm', 'train.steps': '300', 'data.path': join(root, 'words'), out: join(root, 'mdlm') });
  }, 600_000);

  for (const objective of ['ar', 'mdlm'] as const) {
    it(`${objective}: mdlm eval --task scores above chance by more than twice the reported standard error`, () => {
      const r = mdlm('eval', '--model', join(root, objective), '--task', join(root, 'task.jsonl'), '--backend', 'cpu', '--elbo-samples', '16', '--json');
      expect(r.stderr).toBe('');
      expect(r.code).toBe(0);
      const { task } = JSON.parse(r.stdout) as TaskReport;
      expect(task.items).toBe(40);
      expect(task.chance).toBeCloseTo(0.25, 12);
      expect(task.scoring).toBe(objective === 'ar' ? 'log-likelihood' : 'elbo');
      expect(task.acc_stderr).toBeCloseTo(Math.sqrt((task.acc * (1 - task.acc)) / 39), 12);
      expect(task.acc - 2 * task.acc_stderr, JSON.stringify(task)).toBeGreaterThan(task.chance);
      expect(task.acc_norm - 2 * task.acc_norm_stderr, JSON.stringify(task)).toBeGreaterThan(task.chance);
      if (objective === 'mdlm') {
        expect(task.elbo_samples).toBe(16);
        expect(task.score_stderr_mean).toBeGreaterThan(0);
      }
      const text = mdlm('eval', '--model', join(root, objective), '--task', join(root, 'task.jsonl'), '--backend', 'cpu', '--elbo-samples', '16');
      expect(text.stdout).toMatch(new RegExp(`^task .*task\\.jsonl: acc ${task.acc.toFixed(4)} ± ${task.acc_stderr.toFixed(4)}  acc_norm `));
    }, 180_000);
  }

  it('gen-ppl: samples of the trained mdlm model under the trained ar model score lower than random letters, and have lower entropy', async () => {
    const m = await openModel(join(root, 'mdlm'), undefined);
    const tok = requireTokenizer(m, 'the test');
    const model = buildModel(new CpuBackend(), m, 1, 31);
    const samples: string[] = [];
    for (let i = 0; i < 6; i++) {
      const ids = await sampleDiffusion({ logits: modelLogits(model, false), prompt: [], genLength: 31, steps: 31, maskId: m.maskId, vocab: m.loaded.model.vocabSize, temperature: 1, remasking: 'low_confidence', seqLen: 31, seed: i });
      samples.push(tok.decode([...ids]).replace(/\s+/g, ' '));
    }
    model.destroy();
    const rng = new PhiloxStream(3, RngPurpose.harness);
    const random = samples.map(() => Array.from({ length: 31 }, () => String.fromCharCode(32 + uniformInt(rng, 95))).join(''));
    writeFileSync(join(root, 'samples.txt'), samples.join('\n') + '\n');
    writeFileSync(join(root, 'random.jsonl'), random.map((text) => JSON.stringify({ text })).join('\n') + '\n');
    const score = (file: string) => {
      const r = mdlm('eval', '--model', join(root, 'ar'), '--gen-ppl', file, '--backend', 'cpu', '--json');
      expect(r.stderr).toBe('');
      expect(r.code).toBe(0);
      return (JSON.parse(r.stdout) as { gen_ppl: { samples: number; gen_ppl: number; nll: number; entropy: number } }).gen_ppl;
    };
    const s = score(join(root, 'samples.txt'));
    const r = score(join(root, 'random.jsonl'));
    expect(s.samples).toBe(6);
    expect(r.samples).toBe(6);
    expect(s.gen_ppl, `samples: ${JSON.stringify(samples)}`).toBeLessThan(r.gen_ppl / 2);
    expect(s.gen_ppl).toBeCloseTo(Math.exp(s.nll), 6);
    expect(s.entropy).toBeLessThan(r.entropy);
    const refused = mdlm('eval', '--model', join(root, 'mdlm'), '--gen-ppl', join(root, 'samples.txt'), '--backend', 'cpu');
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/--gen-ppl scores samples under an AR model/);
  }, 240_000);

  it('a malformed line and a gold index out of range are refused naming the file and line', () => {
    const bad = join(root, 'bad.jsonl');
    const good = JSON.stringify({ context: 'apple', choices: [' river', ' xq'], gold: 0 });
    const cases: [string, RegExp][] = [
      [`${good}\n{"context": "a", "choices": [" b", " c"], "gold": 2}\n`, /bad\.jsonl:2: "gold" 2 is out of range for 2 choices/],
      [`${good}\n\n{not json\n`, /bad\.jsonl:3: not valid JSON/],
      [`{"context": "a", "choices": [" b"], "gold": 0}\n`, /bad\.jsonl:1: "choices" must be an array of at least two non-empty strings/],
      [`{"context": 3, "choices": [" b", " c"], "gold": 0}\n`, /bad\.jsonl:1: "context" must be a string/],
    ];
    for (const [text, message] of cases) {
      writeFileSync(bad, text);
      const r = mdlm('eval', '--model', join(root, 'ar'), '--task', bad, '--backend', 'cpu');
      expect(r.code).toBe(1);
      expect(r.stderr).toMatch(message);
    }
  }, 120_000);
});
