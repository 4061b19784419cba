/**
 * GRPO for autoregressive models: each step takes `promptsPerStep` prompts (the user's turn,
 * rendered with the chat template and the start of an assistant turn), samples `groupSize`
 * completions of each with the KV-cached sampler under the current parameters, scores them with
 * the reward, normalises the rewards within each group (the advantages) and takes `iterations`
 * optimizer steps of the clipped-ratio objective with a KL penalty to a frozen reference (the
 * starting parameters), each one forward and backward pass of the model's weighted
 * cross-entropy whose weights carry the objective (src/rl/grpo.ts).
 *
 * A completion is the generated tokens up to and including EOS (so the model learns to stop); its
 * text for the reward ends before EOS, or where the template's closing of the assistant turn
 * appears. One completion is one model row (prompt then completion, the rest padding in an
 * attention segment of its own), so the model runs promptsPerStep · groupSize rows.
 */
import type { ChatTemplate } from '../data/chat.js';
import type { Tokenizer } from '../data/tokenizer.js';
import { fail } from '../errors.js';
import { Decoder } from '../model/decode.js';
import type { LlamaModel } from '../model/llama.js';
import { MAX_DECODE_KEYS } from '../ops/attention_decode.js';
import type { AdamW } from '../optim/adamw.js';
import { PhiloxStream, RngPurpose } from '../rng/philox.js';
import { sampleAr } from '../sampling/ar.js';
import { type CompletionTokens, groupAdvantages, grpoWeights } from './grpo.js';
import { type Reward, type RlPrompt, scoreAll } from './reward.js';

export interface GrpoOptions {
  /** Completions sampled per prompt (G). */
  readonly groupSize: number;
  readonly promptsPerStep: number;
  /** Tokens a completion has at most (also bounded by the context the prompt leaves). */
  readonly maxNewTokens: number;
  /** Sampling temperature of the rollouts (> 0). */
  readonly temperature: number;
  /** ε of the clipped ratio. */
  readonly clip: number;
  /** β of the KL penalty to the reference (0: none, and no reference model). */
  readonly beta: number;
  /** Optimizer steps on each batch of rollouts (μ); the ratio differs from 1 from the second on. */
  readonly iterations: number;
  readonly seed: number;
}

export interface GrpoParts {
  /** The policy, with promptsPerStep · groupSize rows. */
  readonly model: LlamaModel;
  readonly optimizer: AdamW;
  /** The frozen reference, with as many rows (needed where beta > 0). */
  readonly reference?: LlamaModel;
  readonly tokenizer: Tokenizer;
  readonly template: ChatTemplate;
  readonly reward: Reward;
}

/** What one GRPO step reports (metrics.jsonl's fields). */
export interface GrpoMetrics {
  readonly step: number;
  readonly loss: number;
  readonly lr: number;
  readonly grad_norm: number;
  readonly reward_mean: number;
  readonly reward_std: number;
  readonly kl: number;
  readonly clip_fraction: number;
  readonly completion_len: number;
}

/** A sampled completion: its ids (EOS included where it stopped there) and its text. */
interface Rollout {
  readonly prompt: RlPrompt;
  readonly promptIds: readonly number[];
  readonly ids: readonly number[];
  readonly text: string;
}

export class GrpoAr {
  private readonly decoder: Decoder;
  private readonly rows: number;
  private updates = 0;

  constructor(private readonly parts: GrpoParts, private readonly opts: GrpoOptions) {
    const { model, reference } = parts;
    this.rows = opts.groupSize * opts.promptsPerStep;
    if (model.batch !== this.rows) fail('BAD_CONFIG', `GRPO: the model runs ${model.batch} rows; promptsPerStep ${opts.promptsPerStep} × groupSize ${opts.groupSize} = ${this.rows} completions need one each`);
    if (opts.beta > 0 && reference?.batch !== this.rows) fail('BAD_CONFIG', `GRPO: beta ${opts.beta} needs a reference model of ${this.rows} rows`);
    if (!(opts.temperature > 0)) fail('BAD_CONFIG', `GRPO: the rollouts' temperature must be > 0 (got ${opts.temperature}): greedy completions of one prompt are all alike and teach nothing`);
    if (model.cfg.seqLen > MAX_DECODE_KEYS) fail('BAD_CONFIG', `GRPO: the KV-cached sampler holds at most ${MAX_DECODE_KEYS} positions; the model's context is ${model.cfg.seqLen}`);
    this.decoder = new Decoder(model);
  }

  /**
   * One GRPO step (0-based `step`) on `prompts` (promptsPerStep of them) at learning rate `lr`:
   * rollouts, rewards, advantages, then `iterations` optimizer updates.
   */
  async step(step: number, prompts: readonly RlPrompt[], lr: number): Promise<GrpoMetrics> {
    const { model, optimizer, reference, reward } = this.parts;
    const o = this.opts;
    if (prompts.length !== o.promptsPerStep) fail('BAD_ARGUMENT', `GRPO step: ${prompts.length} prompts, expected promptsPerStep ${o.promptsPerStep}`);
    optimizer.flush();
    const rollouts: Rollout[] = [];
    for (const [k, p] of prompts.entries()) {
      const promptIds = this.promptIds(p);
      for (let g = 0; g < o.groupSize; g++) {
        const seed = (o.seed * 1_000_003 + step * this.rows + k * o.groupSize + g) % 2 ** 52;
        rollouts.push({ prompt: p, promptIds, ...(await this.complete(promptIds, o.temperature, seed)) });
      }
    }
    const rewards = await scoreAll(reward, rollouts.map((r) => ({ prompt: r.prompt, completion: r.text })));
    const advantages = groupAdvantages(rewards, o.groupSize);

    const batch = this.batchOf(rollouts);
    const completions: CompletionTokens[] = rollouts.map((_, i) => ({ positions: batch.positionsOf[i]!, advantage: advantages[i]! }));
    const oldLogp = await targetLogProbs(model, batch);
    const refLogp = o.beta > 0 ? await targetLogProbs(reference!, batch) : undefined;
    let last = { loss: 0, clipFraction: 0, kl: 0, gradNorm: 0 };
    for (let it = 0; it < o.iterations; it++) {
      const logp = it === 0 ? oldLogp : await targetLogProbs(model, batch);
      const w = grpoWeights({ completions, logp, oldLogp, ...(refLogp ? { refLogp } : {}), clip: o.clip, beta: o.beta });
      model.setBatch({ inputs: batch.inputs, targets: batch.targets, segIds: batch.segIds, positions: batch.positions, weights: w.weights }, true);
      model.forwardBackward(true, optimizer.takeDeferred());
      optimizer.measure();
      optimizer.defer(lr, ++this.updates);
      const [gradNorm] = (await model.backend.download(optimizer.normOut)) as Float32Array;
      optimizer.flush();
      last = { loss: w.loss, clipFraction: w.clipFraction, kl: w.kl, gradNorm: gradNorm! };
    }
    const mean = rewards.reduce((s, r) => s + r, 0) / rewards.length;
    const std = Math.sqrt(rewards.reduce((s, r) => s + (r - mean) ** 2, 0) / rewards.length);
    return {
      step: step + 1, loss: last.loss, lr, grad_norm: last.gradNorm, reward_mean: mean, reward_std: std, kl: last.kl, clip_fraction: last.clipFraction,
      completion_len: rollouts.reduce((s, r) => s + r.ids.length, 0) / rollouts.length,
    };
  }

  /** The mean reward of greedy completions of `prompts` under the current parameters (held-out evaluation). */
  async evaluate(prompts: readonly RlPrompt[]): Promise<number> {
    this.parts.optimizer.flush();
    const items: { prompt: RlPrompt; completion: string }[] = [];
    for (const p of prompts) items.push({ prompt: p, completion: (await this.complete(this.promptIds(p), 0, 0)).text });
    const rewards = await scoreAll(this.parts.reward, items);
    return rewards.reduce((s, r) => s + r, 0) / Math.max(1, rewards.length);
  }

  destroy(): void {
    this.decoder.destroy();
  }

  private promptIds(p: RlPrompt): number[] {
    const { ids } = this.parts.template.encode([{ role: 'user', content: p.prompt }], true, p.where);
    if (ids.length >= this.parts.model.cfg.seqLen) fail('BAD_ARGUMENT', `${p.where}: the prompt takes ${ids.length} tokens, leaving no room for a completion in the model's context of ${this.parts.model.cfg.seqLen}`);
    return ids;
  }

  private async complete(promptIds: readonly number[], temperature: number, seed: number): Promise<{ ids: number[]; text: string }> {
    const { model, tokenizer, template } = this.parts;
    const T = model.cfg.seqLen;
    const eos = tokenizer.eosId;
    const ids = await sampleAr({
      logits: () => fail('BAD_ARGUMENT', 'GRPO: a completion outgrew the KV cache'), decoder: this.decoder, prompt: [...promptIds], seqLen: T, vocab: model.cfg.vocabSize,
      maxNewTokens: Math.min(this.opts.maxNewTokens, T - promptIds.length), temperature, topK: 0, topP: 1, eosId: eos, stopAtEos: true, seed,
    });
    const end = ids.indexOf(eos);
    let text = tokenizer.decode(end >= 0 ? ids.slice(0, end) : ids);
    const close = template.turnEnd === undefined ? -1 : text.indexOf(template.turnEnd);
    if (close >= 0) text = text.slice(0, close);
    return { ids, text };
  }

  /** The model rows of the rollouts: prompt then completion, targets on the completion's tokens only. */
  private batchOf(rollouts: readonly Rollout[]): RolloutBatch {
    const T = this.parts.model.cfg.seqLen;
    const N = this.rows * T;
    const inputs = new Int32Array(N);
    const targets = new Int32Array(N).fill(-1);
    const segIds = new Int32Array(N).fill(1);
    const positions = new Int32Array(N);
    const positionsOf: number[][] = [];
    rollouts.forEach((r, row) => {
      const all = [...r.promptIds, ...r.ids];
      const base = row * T;
      for (let j = 0; j < T; j++) positions[base + j] = j;
      inputs.set(all, base);
      segIds.fill(0, base, base + all.length);
      const mine: number[] = [];
      for (let j = r.promptIds.length - 1; j < all.length - 1; j++) {
        targets[base + j] = all[j + 1]!;
        mine.push(base + j);
      }
      positionsOf.push(mine);
    });
    return { inputs, targets, segIds, positions, positionsOf };
  }
}

interface RolloutBatch {
  readonly inputs: Int32Array;
  readonly targets: Int32Array;
  readonly segIds: Int32Array;
  readonly positions: Int32Array;
  /** Per rollout: the batch indices whose targets are its completion's tokens. */
  readonly positionsOf: readonly (readonly number[])[];
}

/** log π(target) at each of the batch's tokens under `model` (0 where there is no target). */
export async function targetLogProbs(model: LlamaModel, batch: Omit<RolloutBatch, 'positionsOf'>): Promise<Float32Array> {
  model.setBatch({ inputs: batch.inputs, targets: batch.targets, segIds: batch.segIds, positions: batch.positions }, true);
  model.forwardLogits();
  const logits = await model.downloadLogits();
  const V = model.cfg.vocabSize;
  const out = new Float32Array(batch.targets.length);
  batch.targets.forEach((t, i) => {
    if (t < 0) return;
    const row = logits.subarray(i * V, (i + 1) * V);
    let max = -Infinity;
    for (const x of row) max = Math.max(max, x);
    let sum = 0;
    for (const x of row) sum += Math.exp(x - max);
    out[i] = row[t]! - max - Math.log(sum);
  });
  return out;
}

/** The prompts of RL step `step`: promptsPerStep of them, in an order shuffled by `seed` once per pass over the file. */
export function promptsOfStep(prompts: readonly RlPrompt[], step: number, perStep: number, seed: number): RlPrompt[] {
  const n = prompts.length;
  const out: RlPrompt[] = [];
  for (let k = 0; k < perStep; k++) {
    const i = step * perStep + k;
    const pass = Math.floor(i / n);
    out.push(prompts[permutation(n, seed, pass)[i % n]!]!);
  }
  return out;
}

function permutation(n: number, seed: number, pass: number): number[] {
  const rng = new PhiloxStream(seed, RngPurpose.dataOrder, pass);
  const p = Array.from({ length: n }, (_, i) => i);
  for (let i = n - 1; i > 0; i--) {
    const j = Math.floor(rng.uniform() * (i + 1));
    [p[i], p[j]] = [p[j]!, p[i]!];
  }
  return p;
}
