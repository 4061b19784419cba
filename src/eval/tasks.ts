/**
 * Likelihood-scored tasks in the lm-evaluation-harness style: a JSONL file, one item a line,
 * `{"context": "...", "choices": ["...", ...], "gold": i}`. A multiple-choice item and a cloze item
 * are the same thing here: each choice is the continuation of the context whose likelihood is
 * scored, appended as it is (a choice carries its own leading space where the text wants one).
 */
import { readFileSync } from 'node:fs';
import { fail } from '../errors.js';
import { type Candidate, type CandidateScore, meanAndStderr } from './score.js';

export interface TaskItem {
  /** 1-based line of the file, for messages. */
  readonly line: number;
  readonly context: string;
  readonly choices: readonly string[];
  /** Index of the correct choice. */
  readonly gold: number;
}

/** The items of a task file; a malformed line is an error naming the file and the line. */
export function readTaskFile(path: string): TaskItem[] {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    return fail('NOT_FOUND', `--task ${path}: cannot read it (${(e as Error).message})`);
  }
  const items: TaskItem[] = [];
  text.split('\n').forEach((raw, i) => {
    if (raw.trim() === '') return;
    items.push(parseTaskLine(raw, `${path}:${i + 1}`, i + 1));
  });
  if (items.length === 0) fail('BAD_FILE', `${path}: no task items (expected JSONL lines {"context": ..., "choices": [...], "gold": index})`);
  return items;
}

function parseTaskLine(raw: string, where: string, line: number): TaskItem {
  let v: unknown;
  try {
    v = JSON.parse(raw);
  } catch (e) {
    return fail('BAD_FILE', `${where}: not valid JSON (${(e as Error).message})`);
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) fail('BAD_FILE', `${where}: expected an object {"context": ..., "choices": [...], "gold": index}`);
  const o = v as Record<string, unknown>;
  if (typeof o.context !== 'string') fail('BAD_FILE', `${where}: "context" must be a string`);
  if (!Array.isArray(o.choices) || o.choices.length < 2 || !o.choices.every((c) => typeof c === 'string' && c !== '')) {
    fail('BAD_FILE', `${where}: "choices" must be an array of at least two non-empty strings`);
  }
  const choices = o.choices as string[];
  const gold = o.gold;
  if (typeof gold !== 'number' || !Number.isInteger(gold)) fail('BAD_FILE', `${where}: "gold" must be an integer index into "choices"`);
  if (gold < 0 || gold >= choices.length) fail('BAD_FILE', `${where}: "gold" ${gold} is out of range for ${choices.length} choices (0..${choices.length - 1})`);
  return { line, context: o.context, choices, gold };
}

/** What a tokenizer gives the task: its encoding, and EOS (an AR context for an item with an empty one, as the harness). */
export interface TaskTokenizer {
  encode(text: string): number[];
  readonly eosId?: number | undefined;
}

/**
 * The scored rows of the items, choice by choice in order: the context's tokens then the choice's,
 * the context cut from the left where the two exceed `maxTokens` (as the harness does).
 */
export function taskCandidates(items: readonly TaskItem[], tok: TaskTokenizer, maxTokens: number, where: string, needsContext: boolean): Candidate[] {
  const out: Candidate[] = [];
  for (const item of items) {
    let context = tok.encode(item.context);
    if (context.length === 0 && needsContext) {
      if (tok.eosId === undefined) fail('BAD_FILE', `${where}:${item.line}: an empty context leaves an AR model nothing to predict the first token from, and the tokenizer has no EOS to stand for it`);
      context = [tok.eosId];
    }
    item.choices.forEach((choice, k) => {
      const continuation = tok.encode(choice);
      if (continuation.length === 0) fail('BAD_FILE', `${where}:${item.line}: choice ${k} encodes to no tokens`);
      const room = maxTokens - continuation.length;
      if (room < (needsContext ? 1 : 0)) fail('BAD_FILE', `${where}:${item.line}: choice ${k} is ${continuation.length} tokens, more than the model's context of ${maxTokens}${needsContext ? ' less one context token' : ''}`);
      out.push({ context: context.slice(Math.max(0, context.length - room)), continuation });
    });
  }
  return out;
}

export interface TaskResult {
  readonly items: number;
  /** Fraction of items whose gold choice has the highest log-likelihood, and its standard error. */
  readonly acc: number;
  readonly accStderr: number;
  /** The same with each log-likelihood divided by its choice's length in characters (the harness's acc_norm). */
  readonly accNorm: number;
  readonly accNormStderr: number;
  /** Expected accuracy of a random guess: the mean of 1 / choices. */
  readonly chance: number;
  /** Mean over the candidates of their scores' standard error (0 for ar: exact). */
  readonly meanScoreStderr: number;
  /** Per item: the chosen index (acc), the chosen index (acc_norm), and each choice's log-likelihood. */
  readonly predictions: readonly { readonly line: number; readonly gold: number; readonly pred: number; readonly predNorm: number; readonly logLik: readonly number[] }[];
}

/** Accuracy and normalised accuracy from the candidates' scores (in taskCandidates' order). */
export function summarizeTask(items: readonly TaskItem[], scores: readonly CandidateScore[]): TaskResult {
  let at = 0;
  const predictions = items.map((item) => {
    const s = scores.slice(at, at + item.choices.length);
    at += item.choices.length;
    const logLik = s.map((x) => x.logLik);
    const pred = argmaxOf(logLik);
    const predNorm = argmaxOf(logLik.map((l, k) => l / [...item.choices[k]!].length));
    return { line: item.line, gold: item.gold, pred, predNorm, logLik };
  });
  if (at !== scores.length) throw new Error(`summarizeTask: ${scores.length} scores for ${at} choices`);
  const acc = accuracy(predictions.map((p) => p.pred === p.gold));
  const norm = accuracy(predictions.map((p) => p.predNorm === p.gold));
  return {
    items: items.length, acc: acc.mean, accStderr: acc.stderr, accNorm: norm.mean, accNormStderr: norm.stderr,
    chance: items.reduce((a, it) => a + 1 / it.choices.length, 0) / items.length,
    meanScoreStderr: scores.reduce((a, s) => a + s.stderr, 0) / scores.length,
    predictions,
  };
}

/** The first index of the largest value. */
function argmaxOf(xs: readonly number[]): number {
  let best = 0;
  for (let i = 1; i < xs.length; i++) if (xs[i]! > xs[best]!) best = i;
  return best;
}

/** Mean of 0/1 outcomes and its standard error (sample standard deviation / √n, the harness's mean_stderr). */
function accuracy(hits: readonly boolean[]): { mean: number; stderr: number } {
  return meanAndStderr(hits.map((h) => (h ? 1 : 0)));
}
