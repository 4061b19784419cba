/**
 * Pretrain -> supervised fine-tuning -> chat, as a user runs them, on a task the test makes:
 * reversing a three-letter word, asked as a conversation ("abc=" -> "cba", through a Jinja chat
 * template). A tiny model pretrained briefly on words, then fine-tuned from that checkpoint on the
 * conversations, answers held-out words (letter triples it never saw) exactly, for ar and for
 * mdlm; `mdlm chat --prompt` prints the answer.
 *
 * The sizes are the smallest at which both objectives get there with room to spare on the CPU:
 * the fine-tuning loss sits on a plateau (the middle letter) before it falls to ~0, at about step
 * 120 of 200 (ar) and 450 of 1000 (mdlm, whose loss sees a quarter of the reply tokens a step
 * that ar's does) over the seeds tried.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CpuBackend } from '../src/backend/cpu/cpu.js';
import { Conversation } from '../src/cli/chat.js';
import { openModel, requireTokenizer } from '../src/cli/model.js';
import { ChatTemplate } from '../src/data/chat.js';
import { mdlm } from './support/cli.js';
import { TEMPLATE, makeReversalTask, reverse, trainAsCli } from './support/reversal.js';

let root: string;
const held: string[] = [];

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), 'mdlm-sft-'));
  const task = await makeReversalTask(root, { maskToken: true });
  held.push(...task.held);
  const prep = task.prepared;
  expect(prep.stderr).toBe('');
  expect(prep.stdout).toMatch(/chat template: tokenizer; \d+ of \d+ tokens are the assistant's/);
  expect(prep.code).toBe(0);
}, 120_000);

afterAll(() => rmSync(root, { recursive: true, force: true }));

const train = trainAsCli;

const RUNS = {
  ar: { batch: '16', lr: '1e-2', seqLen: '32', steps: '200' },
  mdlm: { batch: '32', lr: '5e-3', seqLen: '10', steps: '1000' },
} as const;

describe('pretrain, fine-tune, chat', () => {
  for (const objective of ['ar', 'mdlm'] as const) {
    it(`${objective}: fine-tuned from a briefly pretrained checkpoint, it reverses at least 90% of 50 held-out words exactly`, async () => {
      const r = RUNS[objective];
      const model = {
        'objective.kind': objective, 'model.dModel': '32', 'model.nLayers': '1', 'model.nHeads': '4', 'model.ffnHidden': '96', 'model.initStd': '0.08',
        'train.evalEvery': '0', 'train.evalBatches': '1', 'train.saveEvery': '0', backend: 'cpu',
      };
      const pre = join(root, `pre-${objective}`);
      await train({ ...model, 'model.seqLen': '32', 'train.batchSize': '16', 'train.steps': '15', 'train.warmupSteps': '5', 'data.path': join(root, 'words'), out: pre });
      const sft = join(root, `sft-${objective}`);
      await train({
        ...model, 'model.seqLen': r.seqLen, 'train.batchSize': r.batch, 'train.lr': r.lr, 'train.minLr': String(Number(r.lr) / 10), 'train.steps': r.steps, 'train.warmupSteps': '10',
        'data.path': join(root, 'chat'), 'data.format': 'chat', out: sft,
      }, pre);

      // The held-out words through mdlm chat's own conversation: template, greedy sampling, the end of the reply.
      const m = await openModel(sft, undefined);
      const tok = requireTokenizer(m, 'chat');
      expect(tok.chatTemplate).toBe(TEMPLATE);
      const conversation = new Conversation(new CpuBackend(), m, tok, new ChatTemplate(TEMPLATE, tok, sft), { seed: 0 });
      const wrong: string[] = [];
      for (const w of held) {
        const reply = await conversation.reply([{ role: 'user', content: w }], () => {});
        if (reply !== reverse(w)) wrong.push(`${w} -> ${reply}`);
      }
      conversation.destroy();
      expect(wrong.length, wrong.join(', ')).toBeLessThanOrEqual(5);

      const asked = held.find((w) => !wrong.some((x) => x.startsWith(w)))!;
      const chat = mdlm('chat', '--checkpoint', sft, '--prompt', asked, '--backend', 'cpu');
      expect(chat.stderr).toBe('');
      expect(chat.stdout).toBe(`${reverse(asked)}\n`);
      expect(chat.code).toBe(0);
    }, 300_000);
  }

  it('mdlm eval on the chat data gives the fine-tuning run\'s val_loss', () => {
    const run = join(root, 'sft-ar');
    const logged = readFileSync(join(run, 'metrics.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l) as { val_loss?: number }).at(-1)!.val_loss!;
    const e = mdlm('eval', '--model', run, '--data', join(root, 'chat'), '--backend', 'cpu', '--json');
    expect(e.code).toBe(0);
    expect((JSON.parse(e.stdout) as { loss: number }).loss).toBeCloseTo(logged, 6);
  }, 120_000);

  it('mdlm chat reads turns line by line (/reset forgets them) and refuses flags of the other kind', () => {
    const run = join(root, 'sft-ar');
    const piped = spawnSync(process.execPath, ['bin/mdlm.js', 'chat', '--checkpoint', run, '--backend', 'cpu'], { input: 'abc\n/reset\n\ndef\n', encoding: 'utf8', timeout: 120_000 });
    expect(piped.stderr).toBe('');
    expect(piped.status).toBe(0);
    const once = (w: string) => mdlm('chat', '--checkpoint', run, '--prompt', w, '--backend', 'cpu').stdout.trim();
    expect(piped.stdout.split('\n')).toEqual([once('abc'), '(conversation reset)', once('def'), '']);
    const wrongKind = mdlm('chat', '--checkpoint', run, '--prompt', 'abc', '--length', '8', '--backend', 'cpu');
    expect(wrongKind.code).toBe(1);
    expect(wrongKind.stderr).toMatch(/--length applies to mdlm \(diffusion\) checkpoints/);
  }, 120_000);
});
