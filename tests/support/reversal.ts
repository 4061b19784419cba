/**
 * The word-reversal task the fine-tuning tests train on: reversing a three-letter word over ten
 * letters, asked as a conversation ("abc=" -> "cba", through a Jinja chat template); 50 held-out
 * words, 600 others to fine-tune on, and 200 lines of words to pretrain on, all from one seed.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { CpuBackend } from '../../src/backend/cpu/cpu.js';
import { resolveRunConfig } from '../../src/config/run.js';
import { prepareData } from '../../src/data/prepare.js';
import { PhiloxStream, RngPurpose } from '../../src/rng/philox.js';
import { openRunData } from '../../src/train/data.js';
import { Trainer } from '../../src/train/trainer.js';
import { type CliResult, mdlm } from './cli.js';

const LETTERS = 'abcdefghij';
/** The user's word then "=", the assistant's reply then EOS. */
export const TEMPLATE = "{% for m in messages %}{% if m.role == 'user' %}{{ m.content }}={% else %}{{ m.content }}{{ eos_token }}{% endif %}{% endfor %}";
export const reverse = (w: string): string => [...w].reverse().join('');

export interface ReversalTask {
  /** The held-out words and the ones fine-tuned on. */
  readonly held: readonly string[];
  readonly train: readonly string[];
  /** `mdlm data prepare --format chat` of the fine-tuning conversations into root/chat. */
  readonly prepared: CliResult;
}

/**
 * Writes the task under root: reverse.jsonl (the conversations), words.txt prepared into root/words
 * (pretraining), a byte tokenizer with the template in root/tokenizer ([MASK] with `maskToken`),
 * and the conversations prepared into root/chat.
 */
export async function makeReversalTask(root: string, opts: { maskToken: boolean }): Promise<ReversalTask> {
  const rng = new PhiloxStream(7, RngPurpose.dataOrder);
  const word = (): string => Array.from({ length: 3 }, () => LETTERS[Math.floor(rng.uniform() * LETTERS.length)]).join('');
  const heldOut = new Set<string>();
  while (heldOut.size < 50) heldOut.add(word());
  const train: string[] = [];
  while (train.length < 600) {
    const w = word();
    if (!heldOut.has(w)) train.push(w);
  }
  writeFileSync(join(root, 'reverse.jsonl'), train.map((w) => JSON.stringify({ prompt: w, response: reverse(w) })).join('\n') + '\n');
  writeFileSync(join(root, 'words.txt'), Array.from({ length: 200 }, () => Array.from({ length: 12 }, word).join(' ')).join('\n\n') + '\n');
  const tok = join(root, 'tokenizer');
  mkdirSync(tok);
  const mask = opts.maskToken ? { mask_token: '[MASK]' } : {};
  writeFileSync(join(tok, 'tokenizer_config.json'), JSON.stringify({ mdlm_tokenizer: 'byte', eos_token: '<|endoftext|>', ...mask, chat_template: TEMPLATE }));
  await prepareData({ input: join(root, 'words.txt'), tokenizer: 'byte', out: join(root, 'words'), valFraction: 0.05, seed: 1 });
  const prepared = mdlm('data', 'prepare', '--format', 'chat', '--input', join(root, 'reverse.jsonl'), '--tokenizer', tok, '--out', join(root, 'chat'), '--val-fraction', '0.2', '--val-tokens', '1200', '--seed', '1', '--no-progress');
  return { held: [...heldOut], train, prepared };
}

/** Train one run as `mdlm train` resolves it (with --init-from where given), on the CPU. */
export async function trainAsCli(overrides: Record<string, string>, initFrom?: string): Promise<void> {
  const { config, tokenizer, init } = await resolveRunConfig({ preset: 'nano', overrides, ...(initFrom ? { initFrom } : {}), log: () => {} });
  const data = await openRunData(config, () => {});
  const t = new Trainer({ config, backend: new CpuBackend(), train: data.train, val: data.val, tokenizer, resume: false, log: () => {} });
  try {
    if (init) t.initFrom(init);
    await t.run();
  } finally {
    t.destroy();
  }
}
