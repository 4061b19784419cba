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
import type { TrainConfig } from '../config/schema.js';
import { type BatchLoader, type LoaderState, createLoader, evalBatchCount } from '../data/loader.js';
import type { TokenSource } from '../data/source.js';
import type { Tokenizer } from '../data/tokenizer.js';
import { fail } from '../errors.js';
import type { LlamaModel } from '../model/llama.js';
import type { ParamFiller } from '../nn/params.js';
import type { Objective } from '../objectives/objective.js';
import type { AdamW } from '../optim/adamw.js';
import { learningRate } from '../optim/lr.js';
import { evaluateModel } from './evaluate.js';
import { type MemoryBreakdown, describeMemory } from './memory.js';
import { setUpRun } from './setup.js';
import { Lookahead, optimizerStep } from './step.js';

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
    const run = setUpRun(cfg, opts.backend, { maskId, ...(opts.fill ? { fill: opts.fill } : {}) });
    this.objective = run.objective;
    this.memory = run.memory;
    this.model = run.model;
    this.optimizer = run.optimizer;
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
