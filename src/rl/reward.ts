/**
 * Rewards for reinforcement learning with verifiable rewards: a function of a prompt and a
 * completion returning a number. Built in: exact match against the prompt row's gold answer, and
 * a format reward (the completion matches a regular expression). A user's reward is a module
 * (`--reward ./reward.mjs`) whose default export is such a function, sync or async; one that
 * throws or returns something other than a finite number is an error naming the module and the
 * prompt.
 */
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { MdlmError, fail } from '../errors.js';

/** One prompt of an RL prompt file: its text (the user's turn) and, where given, its gold answer. */
export interface RlPrompt {
  readonly prompt: string;
  readonly answer?: string;
  /** Where it comes from (file:line), for errors. */
  readonly where: string;
}

/** A user's reward function: (prompt, completion, gold answer) → number, sync or async. */
export type RewardFunction = (prompt: string, completion: string, answer: string | undefined) => number | Promise<number>;

export interface Reward {
  /** How errors name it: "exact-match", "format /.../" or the module's path. */
  readonly name: string;
  readonly score: RewardFunction;
}

/** 1 where the completion, trimmed, is the gold answer, trimmed; else 0. A prompt without an answer is an error. */
export function exactMatchReward(): Reward {
  return {
    name: 'exact-match',
    score: (_prompt, completion, answer) => {
      if (answer === undefined) throw new Error('the prompt has no "answer" to match');
      return completion.trim() === answer.trim() ? 1 : 0;
    },
  };
}

/** 1 where the whole completion matches `pattern` (a regular expression's source), else 0. */
export function formatReward(pattern: string): Reward {
  let re: RegExp;
  try {
    re = new RegExp(`^(?:${pattern})$`, 's');
  } catch (e) {
    return fail('BAD_ARGUMENT', `format reward: /${pattern}/ is not a regular expression: ${(e as Error).message}`);
  }
  return { name: `format /${pattern}/`, score: (_prompt, completion) => (re.test(completion) ? 1 : 0) };
}

/** A reward module's default export, loaded from `path` (relative to the working directory). */
export async function loadRewardModule(path: string): Promise<Reward> {
  const file = resolve(path);
  let mod: { default?: unknown };
  try {
    mod = (await import(pathToFileURL(file).href)) as { default?: unknown };
  } catch (e) {
    return fail('BAD_FILE', `reward module ${path}: cannot be loaded: ${(e as Error).message}`);
  }
  const fn = mod.default;
  if (typeof fn !== 'function') fail('BAD_FILE', `reward module ${path}: its default export is ${fn === undefined ? 'missing' : `a ${typeof fn}`}; export default a function (prompt, completion, answer) => number`);
  return { name: path, score: fn as RewardFunction };
}

/** `reward` built from the CLI's words: "exact-match", "format:REGEX", or a module path. */
export async function rewardFrom(spec: string): Promise<Reward> {
  if (spec === 'exact-match') return exactMatchReward();
  if (spec.startsWith('format:')) return formatReward(spec.slice('format:'.length));
  return loadRewardModule(spec);
}

/** The rewards of each (prompt, completion), in order; a throw or a non-number names the reward and the prompt. */
export async function scoreAll(reward: Reward, items: readonly { prompt: RlPrompt; completion: string }[]): Promise<number[]> {
  const out: number[] = [];
  for (const { prompt, completion } of items) {
    let r: unknown;
    try {
      r = await reward.score(prompt.prompt, completion, prompt.answer);
    } catch (e) {
      if (e instanceof MdlmError) throw e;
      return fail('BAD_ARGUMENT', `reward ${reward.name} threw on the prompt at ${prompt.where} (${JSON.stringify(prompt.prompt)}): ${(e as Error)?.message ?? String(e)}`);
    }
    if (typeof r !== 'number' || !Number.isFinite(r)) {
      fail('BAD_ARGUMENT', `reward ${reward.name} returned ${typeof r === 'number' ? r : `a ${r === null ? 'null' : typeof r}`} for the prompt at ${prompt.where} (${JSON.stringify(prompt.prompt)}); it must return a finite number`);
    }
    out.push(r);
  }
  return out;
}

/**
 * The prompts of an RL prompt file: JSONL rows {"prompt": "...", "answer": "..."} (the answer
 * optional: the exact-match reward needs it, a module may use it). A malformed row is an error
 * naming its line.
 */
export function parsePrompts(text: string, file: string): RlPrompt[] {
  const out: RlPrompt[] = [];
  text.split('\n').forEach((line, i) => {
    if (line.trim() === '') return;
    const where = `${file}:${i + 1}`;
    let row: unknown;
    try {
      row = JSON.parse(line);
    } catch (e) {
      fail('BAD_FILE', `${where}: not JSON (${(e as Error).message}); expected {"prompt": "...", "answer": "..."}`);
    }
    const r = row as Record<string, unknown>;
    if (typeof row !== 'object' || row === null || Array.isArray(row) || typeof r.prompt !== 'string') fail('BAD_FILE', `${where}: expected {"prompt": "...", "answer": "..."} with a string "prompt"`);
    const extra = Object.keys(r).filter((k) => k !== 'prompt' && k !== 'answer');
    if (extra.length) fail('BAD_FILE', `${where}: unknown keys ${extra.join(', ')}; a prompt row has "prompt" and, optionally, "answer"`);
    if (r.answer !== undefined && typeof r.answer !== 'string') fail('BAD_FILE', `${where}: "answer" must be a string`);
    out.push({ prompt: r.prompt, ...(r.answer !== undefined ? { answer: r.answer as string } : {}), where });
  });
  if (out.length === 0) fail('BAD_FILE', `${file}: no prompts`);
  return out;
}
