/**
 * The training loop: AdamW with warmup + decay, gradient accumulation, global-norm clipping,
 * periodic evaluation (AR: loss and perplexity; mdlm: the ELBO bound over fixed noise levels),
 * metrics as JSON lines, atomic checkpoints with everything a bit-exact resume needs, and a clean
 * stop on Ctrl-C. A NaN/Inf loss or gradient stops the run (or skips the step) and is never saved.
 */
import { appendFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import type { Backend } from '../backend/backend.js';
import { latestCheckpoint, loadCheckpoint, saveCheckpoint } from '../checkpoint/checkpoint.js';
import { fromHfTensors } from '../checkpoint/hf.js';
import { openTensors } from '../checkpoint/safetensors.js';
import { flopsPerToken } from '../config/model-size.js';
import type { ObjectiveSection, PRECISIONS, TrainConfig } from '../config/schema.js';
import { type BatchLoader, type LoaderState, createLoader, evalBatchCount } from '../data/loader.js';
import type { TokenSource } from '../data/source.js';
import type { Tokenizer } from '../data/tokenizer.js';
import { MdlmError, fail } from '../errors.js';
import { LlamaModel } from '../model/llama.js';
import type { ParamFiller } from '../nn/params.js';
import { ArObjective } from '../objectives/ar.js';
import { MdlmObjective } from '../objectives/mdlm.js';
import type { Objective, TokenBatch } from '../objectives/objective.js';
import { AdamW } from '../optim/adamw.js';
import { learningRate } from '../optim/lr.js';
import type { FloatDType } from '../tensor.js';
import { evaluateModel } from './evaluate.js';
import { type MemoryBreakdown, activationSaving, checkTrainingFits, describeMemory, recordsSteps, withMemoryEstimate } from './memory.js';

export interface TrainerOptions {
  readonly config: TrainConfig;
  readonly backend: Backend;
  readonly train: TokenSource;
  readonly val: TokenSource | undefined;
  readonly tokenizer: Tokenizer;
  /** Continue from the newest complete checkpoint in config.out. */
  readonly resume: boolean;
  /** Stop after this many steps of this invocation (for tests; the schedule still spans train.steps). */
  readonly maxSteps?: number;
  readonly log: (line: string) => void;
  readonly onStep?: (m: StepMetrics) => void;
  /** Computes the initial parameter values (default: on this thread). */
  readonly fill?: ParamFiller;
  /** Aborted: finish the current step, save a checkpoint, return. */
  readonly signal?: AbortSignal;
}

export interface StepMetrics {
  readonly step: number;
  readonly loss: number;
  readonly lr: number;
  readonly grad_norm: number;
  readonly tokens_per_s: number;
  readonly skipped?: boolean;
}

export interface EvalMetrics {
  readonly step: number;
  readonly val_loss: number;
  readonly val_ppl: number;
  readonly val_tokens: number;
}

export interface TrainResult {
  readonly step: number;
  readonly losses: readonly number[];
  readonly lastEval: EvalMetrics | undefined;
  readonly checkpoint: string | undefined;
  readonly interrupted: boolean;
}

interface SavedTrainerState {
  step: number;
  loader: LoaderState;
  tokens: number;
  seed: number;
  [key: string]: unknown;
}

export class Trainer {
  readonly model: LlamaModel;
  readonly objective: Objective;
  readonly optimizer: AdamW;
  private readonly loader: BatchLoader;
  private readonly batches: Lookahead<LoaderState>;
  private readonly cfg: TrainConfig;
  private readonly metricsPath: string;
  private step = 0;
  private tokens = 0;
  private readonly memory: MemoryBreakdown;

  constructor(private readonly opts: TrainerOptions) {
    const cfg = opts.config;
    this.cfg = cfg;
    const tok = opts.tokenizer;
    if (cfg.model.vocabSize < tok.vocabSize) {
      fail('BAD_CONFIG', `model.vocabSize ${cfg.model.vocabSize} is smaller than the ${tok.name} tokenizer's ${tok.vocabSize} ids; raise it (e.g. to ${Math.ceil(tok.vocabSize / 64) * 64})`);
    }
    const maskId = this.maskId();
    // Every run evaluates at its end: a validation split too small for one batch fails now, not
    // after the training it would cost.
    if (opts.val) evalBatchCount(opts.val, { seqLen: cfg.model.seqLen, batchSize: cfg.train.batchSize });
    const dtype = computeDtype(cfg.train.precision, opts.backend);
    this.objective = createObjective(cfg.objective, cfg.train.seed, maskId);
    const record = recordsSteps(cfg.train, opts.backend);
    const saving = activationSaving(cfg.train, this.objective, opts.backend);
    const memory = checkTrainingFits(opts.backend, cfg.model, cfg.train.batchSize, dtype, saving);
    this.memory = memory;
    this.model = withMemoryEstimate(memory, () => new LlamaModel(opts.backend, cfg.model, cfg.train.batchSize, cfg.train.seed, {
      dtype, record, ...saving, ...(opts.fill ? { fill: opts.fill } : {}),
    }));
    this.optimizer = withMemoryEstimate(memory, () => new AdamW(this.model.store, {
      beta1: cfg.train.beta1, beta2: cfg.train.beta2, eps: cfg.train.adamEps, weightDecay: cfg.train.weightDecay, gradClip: cfg.train.gradClip,
    }));
    this.loader = createLoader(opts.train, { seqLen: cfg.model.seqLen, batchSize: cfg.train.batchSize, seed: cfg.train.seed, mode: cfg.data.mode });
    this.batches = new Lookahead(() => this.loader.next(), () => this.loader.state());
    mkdirSync(cfg.out, { recursive: true });
    this.metricsPath = join(cfg.out, 'metrics.jsonl');
  }

  /** The [MASK] id: the config's, which must not be an id the tokenizer produces (except its own mask). */
  private maskId(): number {
    const id = this.cfg.objective.maskTokenId ?? this.opts.tokenizer.maskId;
    if (id >= this.cfg.model.vocabSize) fail('BAD_CONFIG', `objective.maskTokenId ${id} is not below model.vocabSize ${this.cfg.model.vocabSize}`);
    if (id < this.opts.tokenizer.vocabSize && id !== this.opts.tokenizer.maskId) {
      fail('BAD_CONFIG', `objective.maskTokenId ${id} is a real token of the ${this.opts.tokenizer.name} tokenizer (its [MASK] is ${this.opts.tokenizer.maskId})`);
    }
    return id;
  }

  describe(): string {
    const m = this.cfg.model;
    const fpt = flopsPerToken(m, m.seqLen, this.cfg.objective.kind);
    return [
      `model: ${(this.model.paramCount / 1e6).toFixed(2)}M parameters (d ${m.dModel}, ${m.nLayers} layers, ${m.nHeads} heads / ${m.nKvHeads} KV, SwiGLU ${m.ffnHidden}, seq ${m.seqLen}, vocab ${m.vocabSize})`,
      `compute: ${(fpt / 1e6).toFixed(1)} MFLOP per token; ${this.model.dtype} activations ${(this.model.activationBytes / 2 ** 20).toFixed(1)} MiB on ${this.opts.backend.description}`,
      `memory: about ${describeMemory(this.memory)}`,
      `objective: ${this.objective.name}; batch ${this.cfg.train.batchSize} × ${m.seqLen} × accum ${this.cfg.train.gradAccum}`,
    ].join('\n');
  }

  private writeMetric(obj: object): void {
    appendFileSync(this.metricsPath, `${JSON.stringify(obj)}\n`);
  }

  /** Restore parameters, optimizer state, step and data cursor from the newest checkpoint. */
  async restore(): Promise<boolean> {
    const latest = latestCheckpoint(this.cfg.out);
    if (!latest) return false;
    const ck = loadCheckpoint(latest.dir, { model: this.cfg.model });
    this.model.loadParams(ck.tensors, latest.dir);
    const b = this.opts.backend;
    for (const [name, dst] of [['m', this.optimizer.m], ['v', this.optimizer.v]] as const) {
      const t = ck.optimizer[name];
      if (!t || !(t.data instanceof Float32Array) || t.data.length !== dst.size) fail('BAD_FILE', `${latest.dir}: optimizer state '${name}' is missing or has the wrong size`);
      b.upload(dst, t.data);
    }
    const state = ck.trainerState as SavedTrainerState;
    this.step = state.step;
    this.tokens = state.tokens;
    this.loader.restore(state.loader);
    this.batches.reset();
    this.opts.log(`resumed from ${latest.dir} at step ${this.step}`);
    return true;
  }

  /** Initialise parameters from a Hugging Face (or mdlm) checkpoint directory with the same shapes. */
  initFrom(dir: string): void {
    const tensors = fromHfTensors(this.cfg.model, openTensors(dir), dir);
    this.model.loadParams(tensors, dir);
    this.opts.log(`initialised parameters from ${dir}`);
  }

  async save(): Promise<string> {
    const b = this.opts.backend;
    this.optimizer.flush();
    await b.sync();
    const values = (await b.download(this.model.store.value)) as Float32Array;
    const tensors: Record<string, Float32Array> = {};
    for (const p of this.model.store.list) tensors[p.name] = values.slice(p.offset, p.offset + p.value.size);
    const m = (await b.download(this.optimizer.m)) as Float32Array;
    const v = (await b.download(this.optimizer.v)) as Float32Array;
    const trainerState: SavedTrainerState = { step: this.step, loader: this.batches.state(), tokens: this.tokens, seed: this.cfg.train.seed, config: this.cfg };
    return saveCheckpoint(
      this.cfg.out,
      { config: this.cfg, tensors, optimizer: { m, v }, trainerState, tokenizerFiles: this.opts.tokenizer.files() },
      { keepLast: this.cfg.train.keepCheckpoints, eosTokenId: this.opts.tokenizer.eosId },
    );
  }

  /** Mean loss over the fixed validation batches (AR: CE; mdlm: ELBO over fixed noise levels). */
  async evaluate(): Promise<EvalMetrics | undefined> {
    const val = this.opts.val;
    if (!val) return undefined;
    this.optimizer.flush();
    const cfg = this.cfg;
    const e = await evaluateModel(this.model, this.objective, val, {
      seqLen: cfg.model.seqLen, batchSize: cfg.train.batchSize, mode: cfg.data.mode, maxBatches: cfg.train.evalBatches,
    });
    return { step: this.step, val_loss: e.loss, val_ppl: e.ppl, val_tokens: e.tokens };
  }

  async run(): Promise<TrainResult> {
    const cfg = this.cfg;
    const t = cfg.train;
    if (this.opts.resume) await this.restore();
    const end = Math.min(t.steps, this.opts.maxSteps === undefined ? Infinity : this.step + this.opts.maxSteps);
    const losses: number[] = [];
    const tokensPerStep = t.batchSize * cfg.model.seqLen * t.gradAccum;
    let lastEval: EvalMetrics | undefined;
    let checkpoint: string | undefined;
    let interrupted = false;
    const schedule = { lr: t.lr, minLr: t.minLr, warmupSteps: t.warmupSteps, totalSteps: t.steps, decay: t.decay, wsdDecayFraction: t.wsdDecayFraction };
    this.model.setLossScale(1 / t.gradAccum);
    while (this.step < end) {
      const started = performance.now();
      const lr = learningRate(schedule, this.step);
      const { loss, gradNorm, finite } = await optimizerStep(this, this.batches, this.step, t.gradAccum, lr, t.nonFinite);
      this.step++;
      this.tokens += tokensPerStep;
      losses.push(loss);
      const seconds = (performance.now() - started) / 1000;
      const m: StepMetrics = { step: this.step, loss, lr, grad_norm: gradNorm, tokens_per_s: tokensPerStep / seconds, ...(finite ? {} : { skipped: true }) };
      this.writeMetric(m);
      this.opts.onStep?.(m);
      const last = this.step === end;
      if ((t.evalEvery > 0 && this.step % t.evalEvery === 0) || last) {
        lastEval = await this.evaluate();
        if (lastEval) {
          this.writeMetric(lastEval);
          this.opts.log(`step ${this.step}: val_loss ${lastEval.val_loss.toFixed(4)} (ppl${this.objective.name === 'mdlm' ? ' bound' : ''} ${lastEval.val_ppl.toFixed(2)})`);
        }
      }
      interrupted = this.opts.signal?.aborted ?? false;
      if ((t.saveEvery > 0 && this.step % t.saveEvery === 0) || last || interrupted) {
        checkpoint = await this.save();
        this.opts.log(`saved ${checkpoint}`);
      }
      if (interrupted) break;
    }
    return { step: this.step, losses, lastEval, checkpoint, interrupted };
  }

  destroy(): void {
    this.optimizer.destroy();
    this.model.destroy();
  }
}

/** What one optimizer step works on. */
export interface StepParts {
  readonly model: LlamaModel;
  readonly objective: Objective;
  readonly optimizer: AdamW;
}

/**
 * Batches one ahead: `prefetch` makes the next batch while the device still runs the current
 * step, so the host's batch work (sampling, tokens) leaves the device no idle time; `take` hands
 * it over. `state` is the source's position before any batch made ahead and not yet taken, so a
 * checkpoint resumes at the first batch not trained on.
 */
export class Lookahead<S> {
  private ahead: { batch: TokenBatch; before: S } | undefined;

  constructor(private readonly make: () => TokenBatch, private readonly position: () => S) {}

  take(): TokenBatch {
    const batch = this.ahead?.batch ?? this.make();
    this.ahead = undefined;
    return batch;
  }

  prefetch(): void {
    if (this.ahead) return;
    const before = structuredClone(this.position());
    this.ahead = { batch: this.make(), before };
  }

  state(): S {
    return this.ahead ? this.ahead.before : this.position();
  }

  /** Drop a batch made ahead (the source was moved: a resume). */
  reset(): void {
    this.ahead = undefined;
  }
}

/**
 * One optimizer step at 0-based `step`: `gradAccum` micro-batches of (prepare, forward, backward;
 * the first one's gradients overwrite the last step's), the global gradient norm, then AdamW at
 * `lr` (deferred into the next step's first pass: queueStep), skipped where the loss or the norm
 * is not finite (an error under nonFinite 'stop', a skipped update under 'skip').
 * The update is queued without reading the norm first: a non-finite norm makes the device's AdamW
 * step the identity (src/ops/adamw.ts), and a non-finite loss comes from non-finite logits, so
 * with a non-finite norm. The loss and the norm are read once, after the whole step, so the
 * device waits for the host only between steps; the next batch is made while it runs this one.
 */
export async function optimizerStep(
  parts: StepParts, batches: Lookahead<unknown>, step: number, gradAccum: number, lr: number, nonFinite: TrainConfig['train']['nonFinite'],
): Promise<{ loss: number; gradNorm: number; finite: boolean }> {
  const { model, optimizer } = parts;
  let loss = await queueStep(parts, batches, step, gradAccum, lr);
  loss += (await model.loss()) / gradAccum;
  const [gradNorm] = (await model.backend.download(optimizer.normOut)) as Float32Array;
  const finite = Number.isFinite(loss) && Number.isFinite(gradNorm!);
  if (!finite && nonFinite === 'stop') {
    throw new MdlmError('BAD_CONFIG', `non-finite ${Number.isFinite(loss) ? 'gradient norm' : 'loss'} at step ${step} (loss ${loss}, grad norm ${gradNorm}); the update was skipped and nothing was saved. Lower train.lr, or set train.nonFinite skip`);
  }
  return { loss, gradNorm: gradNorm!, finite };
}

/**
 * optimizerStep's work without its read-back: the micro-batches and the gradient norm queued, and
 * AdamW deferred: the next step's first pass queues it before its forward, inside its recording
 * (one graph a step on CUDA); whatever reads the parameters before then calls `optimizer.flush()`
 * first (the Trainer does). The first pass also queues the update deferred by the step before, if
 * any.
 * Returns the loss of the micro-batches before the last (read before the next overwrites it; 0
 * with one), as a share of the step's mean; the last one's is in the model's loss buffer.
 */
export async function queueStep(parts: StepParts, batches: Lookahead<unknown>, step: number, gradAccum: number, lr: number): Promise<number> {
  const { model, objective, optimizer } = parts;
  let loss = 0;
  for (let micro = 0; micro < gradAccum; micro++) {
    await objective.prepare(model, batches.take(), step * gradAccum + micro, 0);
    // The first micro-batch's gradients replace the last step's: no zeroing, no read-back in the GEMMs.
    model.forwardBackward(micro === 0, micro === 0 ? optimizer.takeDeferred() : undefined);
    batches.prefetch();
    if (micro < gradAccum - 1) loss += (await model.loss()) / gradAccum;
  }
  optimizer.measure();
  optimizer.defer(lr, step + 1);
  return loss;
}

/** train.precision on a backend: the compute dtype (auto: bf16 where the kernels are bf16 tensor-core kernels, CUDA). */
export function computeDtype(precision: (typeof PRECISIONS)[number], backend: Backend): FloatDType {
  const dtype = precision === 'auto' ? (backend.name === 'cuda' ? 'bf16' : 'f32') : precision;
  if (!backend.floatDtypes.has(dtype)) {
    fail('BAD_CONFIG', `train.precision ${precision}: the ${backend.name} backend computes in ${[...backend.floatDtypes].filter((d) => d === 'f32' || d === 'bf16').join(' or ')} only; use train.precision auto or f32, or another --backend`);
  }
  return dtype;
}

/** The objective a config section describes; `maskId` is the [MASK] id, checked by the caller. */
export function createObjective(o: ObjectiveSection, seed: number, maskId: number): Objective {
  if (o.kind === 'ar') return new ArObjective();
  return new MdlmObjective({
    maskId, seed, schedule: o.schedule, exponent: o.exponent, tMin: o.tMin, tMax: o.tMax, antithetic: o.antithetic,
    weighting: o.weighting, varilenProb: o.varilenProb, evalNoiseLevels: o.evalNoiseLevels,
  });
}
