/**
 * LLaDA-style sampling for masked-diffusion LMs (Nie et al. 2025, "Large Language Diffusion
 * Models", generate.py): the generated span starts all-mask and is unmasked over `steps` model
 * calls, block by block (semi-autoregressive) from left to right. At each step the bidirectional
 * model sees the whole current sequence; for every masked position of the current block it
 * predicts x0 (argmax, with Gumbel noise when temperature > 0; the mask token itself is never
 * predicted), and the schedule's number of those positions is committed — the most confident ones
 * (`low_confidence` remasking: the rest stay masked) or uniformly random ones (`random`).
 * Positions after the current block are never committed early. Committed tokens are final.
 */
import { fail } from '../errors.js';
import { PhiloxStream, RngPurpose } from '../rng/philox.js';
import { checkInt, checkLogits, checkSeed, checkTokenIds } from './check.js';
import type { LogitsFn } from './types.js';

export type Remasking = 'low_confidence' | 'random';

export interface DiffusionStepInfo {
  /** Block index, 0-based. */
  block: number;
  /** Step within the block, 0-based. */
  stepInBlock: number;
  /** Positions (in the whole sequence) committed at this step, in commit order. */
  committed: number[];
}

export interface DiffusionSampleOptions {
  logits: LogitsFn;
  /** Fixed prefix; never changed. May be empty. */
  prompt: number[];
  /** Number of tokens to generate after the prompt. */
  genLength: number;
  /** Total model calls (S), spread evenly over the blocks: steps / numBlocks per block. */
  steps: number;
  /** Semi-autoregressive block size; genLength must be a multiple of it. Default genLength (one block). */
  blockLength?: number;
  maskId: number;
  vocab: number;
  /** 0 = argmax; > 0 samples x0 by Gumbel-max at this temperature (as LLaDA). */
  temperature: number;
  remasking: Remasking;
  /** The model's context length: prompt + genLength must fit. */
  seqLen: number;
  seed: number;
  /** After every step, with a copy of the sequence, the global step index and details. */
  onStep?: (tokens: Int32Array, step: number, info: DiffusionStepInfo) => void;
}

const WHERE = 'sampleDiffusion';

/**
 * How many of `maskCount` masked tokens to commit at each of `steps` steps: spread evenly,
 * the remainder going to the first steps (LLaDA's get_num_transfer_tokens).
 */
export function numTransferTokens(maskCount: number, steps: number): number[] {
  const base = Math.floor(maskCount / steps);
  const rem = maskCount % steps;
  return Array.from({ length: steps }, (_, i) => base + (i < rem ? 1 : 0));
}

/** Check options and return the derived block layout. Exposed so callers can validate up front. */
export function checkDiffusionOptions(opts: DiffusionSampleOptions): { numBlocks: number; blockLength: number; stepsPerBlock: number } {
  if (typeof opts.logits !== 'function') fail('BAD_ARGUMENT', `${WHERE}: logits must be a function (tokens, rows, seqLen) => Promise<Float32Array>`);
  const vocab = checkInt(WHERE, 'vocab', opts.vocab, 2, ' (the tokens plus the mask token)');
  const genLength = checkInt(WHERE, 'genLength', opts.genLength, 1);
  const steps = checkInt(WHERE, 'steps', opts.steps, 1);
  const blockLength = checkInt(WHERE, 'blockLength', opts.blockLength ?? genLength, 1);
  const seqLen = checkInt(WHERE, 'seqLen', opts.seqLen, 1);
  checkSeed(WHERE, opts.seed);
  const maskId = opts.maskId;
  if (!Number.isInteger(maskId) || maskId < 0 || maskId >= vocab) {
    fail('BAD_ARGUMENT', `${WHERE}: maskId is ${JSON.stringify(maskId)}; expected an integer in [0, ${vocab}) (vocab = ${vocab})`);
  }
  const t = opts.temperature;
  if (typeof t !== 'number' || !Number.isFinite(t) || t < 0) {
    fail('BAD_ARGUMENT', `${WHERE}: temperature is ${JSON.stringify(t)}; expected a finite number ≥ 0 (0 = argmax)`);
  }
  if (opts.remasking !== 'low_confidence' && opts.remasking !== 'random') {
    fail('BAD_ARGUMENT', `${WHERE}: remasking is ${JSON.stringify(opts.remasking)}; expected 'low_confidence' or 'random'`);
  }
  if (!Array.isArray(opts.prompt)) fail('BAD_ARGUMENT', `${WHERE}: prompt must be an array of token ids`);
  checkTokenIds(WHERE, 'prompt', opts.prompt, vocab);
  const total = opts.prompt.length + genLength;
  if (total > seqLen) {
    fail('BAD_ARGUMENT', `${WHERE}: prompt (${opts.prompt.length} tokens) + genLength (${genLength}) = ${total} exceeds seqLen ${seqLen}; shorten the prompt or generate fewer tokens`);
  }
  if (blockLength > genLength || genLength % blockLength !== 0) {
    fail('BAD_ARGUMENT', `${WHERE}: genLength ${genLength} is not a multiple of blockLength ${blockLength}; pick a blockLength that divides genLength (e.g. ${genLength})`);
  }
  const numBlocks = genLength / blockLength;
  if (steps < numBlocks || steps % numBlocks !== 0) {
    fail('BAD_ARGUMENT', `${WHERE}: steps ${steps} must be a positive multiple of the number of blocks ${numBlocks} (genLength ${genLength} / blockLength ${blockLength}) so each block gets steps / blocks steps`);
  }
  return { numBlocks, blockLength, stepsPerBlock: steps / numBlocks };
}

/** Uniform in the open interval (0, 1): 24 random bits, offset by half a unit. */
function openUniform(rng: PhiloxStream): number {
  return ((rng.nextU32() >>> 8) + 0.5) * 5.9604644775390625e-8;
}

/** Returns the whole sequence: prompt followed by the genLength generated tokens. */
export async function sampleDiffusion(opts: DiffusionSampleOptions): Promise<Int32Array> {
  const { numBlocks, blockLength, stepsPerBlock } = checkDiffusionOptions(opts);
  const { logits, prompt, genLength, maskId, vocab, temperature, remasking, onStep } = opts;
  const rng = new PhiloxStream(opts.seed, RngPurpose.sampling);
  const P = prompt.length;
  const L = P + genLength;
  const x = new Int32Array(L).fill(maskId);
  x.set(prompt);

  let step = 0;
  for (let b = 0; b < numBlocks; b++) {
    const start = P + b * blockLength;
    const end = start + blockLength;
    const schedule = numTransferTokens(blockLength, stepsPerBlock);
    for (let s = 0; s < stepsPerBlock; s++, step++) {
      const k = schedule[s]!;
      const committed: number[] = [];
      if (k > 0) {
        const lg = checkLogits(WHERE, await logits(x.slice(), 1, L), 1, L, vocab);
        // Candidates: the still-masked positions of this block, with their x0 and confidence.
        const cand: { pos: number; tok: number; conf: number }[] = [];
        for (let pos = start; pos < end; pos++) {
          if (x[pos] !== maskId) continue;
          const row = lg.subarray(pos * vocab, (pos + 1) * vocab);
          const { tok, prob } = predict(row, maskId, temperature, rng);
          cand.push({ pos, tok, conf: remasking === 'low_confidence' ? prob : rng.uniform() });
        }
        // Highest confidence first; ties to the leftmost position.
        cand.sort((a, c) => c.conf - a.conf || a.pos - c.pos);
        for (const c of cand.slice(0, k)) {
          x[c.pos] = c.tok;
          committed.push(c.pos);
        }
      }
      onStep?.(x.slice(), step, { block: b, stepInBlock: s, committed });
    }
  }
  return x;
}

/**
 * x0 for one position and its confidence: the softmax probability (of the noise-free logits,
 * mask excluded) of the chosen token. NaN logits count as −∞.
 */
function predict(row: Float32Array, maskId: number, temperature: number, rng: PhiloxStream): { tok: number; prob: number } {
  const V = row.length;
  let max = -Infinity;
  let best = -1;
  let bestScore = -Infinity;
  for (let i = 0; i < V; i++) {
    if (i === maskId) continue;
    const v = row[i]!;
    const l = v === v ? v : -Infinity;
    if (l > max) max = l;
    // Gumbel-max: argmax(l + T·g), g = −log(−log u), samples softmax(l / T).
    const score = temperature > 0 && l > -Infinity ? l - temperature * Math.log(-Math.log(openUniform(rng))) : l;
    if (score > bestScore) {
      bestScore = score;
      best = i;
    }
  }
  if (best < 0 || max === -Infinity) fail('BAD_ARGUMENT', `${WHERE}: every logit other than the mask token is −∞ or NaN; nothing can be predicted`);
  if (max === Infinity) return { tok: best, prob: 1 };
  let sum = 0;
  for (let i = 0; i < V; i++) {
    if (i === maskId) continue;
    const v = row[i]!;
    if (v === v) sum += Math.exp(v - max);
  }
  return { tok: best, prob: Math.exp(row[best]! - max) / sum };
}
