/**
 * `mdlm sample`: generate text from a checkpoint. AR checkpoints sample token by token
 * (temperature, top-k, top-p, stop at EOS) and stream each token as it comes; mdlm checkpoints
 * unmask a span LLaDA-style (src/sampling/diffusion.ts) — on a terminal the span is redrawn after
 * every step with ░ for the tokens still masked, elsewhere each block is printed once it is final.
 */
import { Command } from 'commander';
import type { Backend } from '../backend/backend.js';
import { fail } from '../errors.js';
import type { Tokenizer } from '../data/tokenizer.js';
import { Decoder } from '../model/decode.js';
import { modelLogits } from '../model/logits.js';
import { MAX_DECODE_KEYS } from '../ops/attention_decode.js';
import { createBackend, parseBackendChoice } from '../runtime/backends.js';
import { type Remasking, sampleAr, sampleDiffusion } from '../sampling/index.js';
import { type OpenedModel, buildModel, openModel, requireTokenizer } from './model.js';
import { choiceOption, intOption, numberOption } from './options.js';

interface SampleFlags {
  checkpoint: string;
  prompt: string;
  backend: string;
  seed: number;
  numSamples: number;
  tokenizer?: string;
  temperature?: number;
  maxNewTokens?: number;
  topK?: number;
  topP?: number;
  ignoreEos?: boolean;
  length?: number;
  steps?: number;
  blockLength?: number;
  remasking?: Remasking;
}

/** Flags of one kind of checkpoint only, refused for the other (mdlm chat shares them). */
const AR_FLAGS = [['maxNewTokens', '--max-new-tokens'], ['topK', '--top-k'], ['topP', '--top-p'], ['ignoreEos', '--ignore-eos']] as const;
const DIFFUSION_FLAGS = [['length', '--length'], ['steps', '--steps'], ['blockLength', '--block-length'], ['remasking', '--remasking']] as const;

/** Refuses the sampling flags of the other objective than the checkpoint's (an ar flag for an mdlm model, and the reverse). */
export function refuseOtherObjectiveFlags(m: { readonly objective: string; readonly loaded: { readonly dir: string } }, flags: object): void {
  const given: Partial<Record<string, unknown>> = flags;
  for (const [key, flag] of m.objective === 'ar' ? DIFFUSION_FLAGS : AR_FLAGS) {
    if (given[key] !== undefined) fail('BAD_ARGUMENT', `${flag} applies to ${m.objective === 'ar' ? 'mdlm (diffusion)' : 'ar'} checkpoints; ${m.loaded.dir} is an ${m.objective} model`);
  }
}

export function sampleCommand(): Command {
  return new Command('sample')
    .description('Generate text from a checkpoint: token by token (ar) or by iterative unmasking (mdlm)')
    .requiredOption('--checkpoint <dir>', "checkpoint directory, or a run's --out directory (its newest complete checkpoint)")
    .option('--prompt <text>', 'text to continue (ar) or to condition on (mdlm)', '')
    .option('--backend <name>', 'auto | cpu | webgpu | cuda', 'auto')
    .option('--seed <n>', 'seed of the sampling draws (sample i uses seed + i)', intOption('--seed', 0), 0)
    .option('--num-samples <n>', 'number of samples', intOption('--num-samples', 1), 1)
    .option('--temperature <t>', 'sampling temperature, 0 = greedy / argmax (default: 1 for ar, 0 for mdlm)', numberOption('--temperature', 0))
    .option('--tokenizer <spec>', "tokenizer (byte | gpt2 | path) when the checkpoint has none")
    .option('--max-new-tokens <n>', 'ar: tokens to generate at most (default 128)', intOption('--max-new-tokens', 1))
    .option('--top-k <k>', 'ar: keep the k most likely tokens (0 = off)', intOption('--top-k', 0))
    .option('--top-p <p>', 'ar: nucleus sampling mass in (0, 1] (1 = off)', numberOption('--top-p', 0, 1, true))
    .option('--ignore-eos', 'ar: keep going after EOS')
    .option('--length <n>', 'mdlm: tokens to generate (default: 64, or what fits after the prompt)', intOption('--length', 1))
    .option('--steps <s>', 'mdlm: model calls in all, spread evenly over the blocks (default: --length)', intOption('--steps', 1))
    .option('--block-length <l>', 'mdlm: semi-autoregressive block size; must divide --length (default: --length)', intOption('--block-length', 1))
    .option('--remasking <how>', 'mdlm: which predictions to commit each step: low_confidence (most confident first) | random', choiceOption('--remasking', ['low_confidence', 'random'] as const))
    .action(async (o: SampleFlags) => {
      const m = await openModel(o.checkpoint, o.tokenizer);
      const tokenizer = requireTokenizer(m, 'sampling');
      refuseOtherObjectiveFlags(m, o);
      if (o.numSamples > 1 && o.temperature === 0) console.error('note: --temperature 0 is deterministic: every sample will be the same');
      // Every check runs before the backend starts.
      const run = m.objective === 'ar' ? planAr(m, tokenizer, o) : planDiffusion(m, tokenizer, o);
      const backend = await createBackend(parseBackendChoice(o.backend));
      try {
        await run(backend);
      } finally {
        backend.destroy();
      }
    });
}

function header(o: SampleFlags, i: number): void {
  if (o.numSamples > 1) process.stdout.write(`${i > 0 ? '\n' : ''}── sample ${i + 1}/${o.numSamples} (seed ${o.seed + i}) ──\n`);
}

type SampleRun = (backend: Backend) => Promise<void>;

function planAr(m: OpenedModel, tokenizer: Tokenizer, o: SampleFlags): SampleRun {
  const maxLen = m.loaded.model.seqLen;
  const encoded = tokenizer.encode(o.prompt);
  if (encoded.length > maxLen) fail('BAD_ARGUMENT', `--prompt is ${encoded.length} tokens, longer than the model's context of ${maxLen}; shorten it`);
  // An empty prompt starts a new document: the EOS that ends the one before.
  const prompt = encoded.length > 0 ? encoded : [tokenizer.eosId];
  const maxNewTokens = o.maxNewTokens ?? 128;
  const seqLen = Math.min(maxLen, prompt.length + maxNewTokens);
  return async (backend) => {
    const model = buildModel(backend, m, 1, seqLen);
    // KV-cached: one one-row pass a token while the sequence fits the context.
    const decoder = seqLen <= MAX_DECODE_KEYS ? new Decoder(model) : undefined;
    try {
      for (let i = 0; i < o.numSamples; i++) {
        header(o, i);
        process.stdout.write(o.prompt);
        const out = new TextStream(tokenizer);
        await sampleAr({
          logits: modelLogits(model, true), ...(decoder ? { decoder } : {}), prompt, maxNewTokens, seqLen, vocab: m.loaded.model.vocabSize,
          temperature: o.temperature ?? 1, topK: o.topK ?? 0, topP: o.topP ?? 1,
          eosId: tokenizer.eosId, stopAtEos: !o.ignoreEos, seed: o.seed + i,
          onToken: (id) => {
            if (id !== tokenizer.eosId || o.ignoreEos) process.stdout.write(out.push([id]));
          },
        });
        process.stdout.write(`${out.flush()}\n`);
      }
    } finally {
      decoder?.destroy();
      model.destroy();
    }
  };
}

function planDiffusion(m: OpenedModel, tokenizer: Tokenizer, o: SampleFlags): SampleRun {
  const maxLen = m.loaded.model.seqLen;
  const prompt = tokenizer.encode(o.prompt);
  if (prompt.length >= maxLen) fail('BAD_ARGUMENT', `--prompt is ${prompt.length} tokens; the model's context of ${maxLen} leaves no room to generate. Shorten it`);
  const length = o.length ?? Math.min(64, maxLen - prompt.length);
  if (prompt.length + length > maxLen) {
    fail('BAD_ARGUMENT', `--prompt (${prompt.length} tokens) + --length ${length} = ${prompt.length + length} exceeds the model's context of ${maxLen}; shorten the prompt or lower --length`);
  }
  const blockLength = o.blockLength ?? length;
  if (length % blockLength !== 0) fail('BAD_ARGUMENT', `--block-length ${blockLength} must divide --length ${length}`);
  const blocks = length / blockLength;
  const steps = o.steps ?? length;
  if (steps % blocks !== 0) fail('BAD_ARGUMENT', `--steps ${steps} must be a multiple of the number of blocks, --length / --block-length = ${blocks}, so every block gets the same number of steps`);
  const stepsPerBlock = steps / blocks;
  const live = process.stdout.isTTY ? new LiveText() : undefined;
  const eos = tokenizer.eosId;
  return async (backend) => {
    const model = buildModel(backend, m, 1, prompt.length + length);
    try {
      for (let i = 0; i < o.numSamples; i++) {
        header(o, i);
        const out = new TextStream(tokenizer);
        let ended = false;
        if (!live) process.stdout.write(o.prompt);
        const result = await sampleDiffusion({
          logits: modelLogits(model, false), prompt, genLength: length, steps, blockLength, maskId: m.maskId,
          vocab: m.loaded.model.vocabSize, temperature: o.temperature ?? 0, remasking: o.remasking ?? 'low_confidence',
          seqLen: prompt.length + length, seed: o.seed + i,
          onStep: (tokens, _step, info) => {
            const gen = Array.from(tokens.subarray(prompt.length));
            if (live) live.update(o.prompt + renderMasked(tokenizer, untilEos(gen, eos), m.maskId));
            else if (info.stepInBlock === stepsPerBlock - 1 && !ended) {
              // The block is final: print it (up to an EOS, where the text ends).
              const block = gen.slice(info.block * blockLength, (info.block + 1) * blockLength);
              const kept = untilEos(block, eos);
              ended = kept.length < block.length;
              process.stdout.write(out.push(kept));
            }
          },
        });
        const text = tokenizer.decode(untilEos(Array.from(result.subarray(prompt.length)), eos));
        if (live) live.finish(o.prompt + text);
        else process.stdout.write(out.flush());
        process.stdout.write('\n');
      }
    } finally {
      model.destroy();
    }
  };
}

export function untilEos(ids: number[], eos: number): number[] {
  const at = ids.indexOf(eos);
  return at < 0 ? ids : ids.slice(0, at);
}

/** Text with masked positions shown as ░ (runs between masks decoded on their own). */
function renderMasked(tokenizer: Tokenizer, ids: number[], maskId: number): string {
  let out = '';
  let run: number[] = [];
  for (const id of ids) {
    if (id !== maskId) {
      run.push(id);
      continue;
    }
    out += `${tokenizer.decode(run)}░`;
    run = [];
  }
  return out + tokenizer.decode(run);
}

/**
 * Incremental decoding for streaming: ids are decoded all together (a byte or BPE token can be
 * half a character) and only the new text is returned; a trailing U+FFFD waits for the rest of
 * its character.
 */
export class TextStream {
  private readonly ids: number[] = [];
  private printed = 0;

  constructor(private readonly tokenizer: Tokenizer) {}

  push(ids: readonly number[]): string {
    this.ids.push(...ids);
    const text = this.tokenizer.decode(this.ids);
    const ready = text.endsWith('\uFFFD') ? text.replace(/\uFFFD+$/, '') : text;
    if (ready.length <= this.printed) return '';
    const fresh = ready.slice(this.printed);
    this.printed = ready.length;
    return fresh;
  }

  /** Whatever is left, incomplete characters included. */
  flush(): string {
    const text = this.tokenizer.decode(this.ids);
    const rest = text.slice(this.printed);
    this.printed = text.length;
    return rest;
  }
}

/**
 * A block of terminal text redrawn in place: cursor back to its first row, clear, print. Control
 * characters a model may emit are shown as U+FFFD (tabs as spaces) so they cannot move the cursor.
 */
class LiveText {
  private rows = 0;

  update(text: string): void {
    const shown = printable(text);
    process.stdout.write(`${this.rewind()}${shown}`);
    this.rows = visualRows(shown, process.stdout.columns || 80);
  }

  finish(text: string): void {
    process.stdout.write(`${this.rewind()}${printable(text)}`);
    this.rows = 0;
  }

  private rewind(): string {
    return this.rows > 1 ? `\r\x1b[${this.rows - 1}A\x1b[J` : '\r\x1b[J';
  }
}

function printable(text: string): string {
  return text.replace(/\t/g, ' ').replace(/[\x00-\x08\x0b-\x1f\x7f]/g, '\uFFFD');
}

function visualRows(text: string, columns: number): number {
  return text.split('\n').reduce((n, line) => n + Math.max(1, Math.ceil(line.length / columns)), 0);
}
