/**
 * The training loop: AdamW with warmup + decay, gradient accumulation, global-norm clipping,
 * periodic evaluation (AR: loss and perplexity; mdlm: the ELBO bound over fixed noise levels),
 * metrics as JSON lines, atomic checkpoints with everything a bit-exact resume needs, and a clean
 * stop on a signal (the caller's AbortSignal). The run directory's rules (refusing an old run,
 * resuming, leftovers) are src/train/run_dir.ts.
 *
 * At a step where both are due the checkpoint is saved before the evaluation, so an interrupted
 * evaluation (the final one included) loses nothing. A save that fails on the filesystem is
 * reported and retried at the next interval; a second failure in a row, or a failed final save,
 * stops the run with the newest checkpoint as it was. A NaN/Inf loss or gradient stops the run
 * (or skips the step: train.nonFinite), and is never saved; `train.maxSkippedSteps` skipped steps
 * in a row, or a run whose every step was skipped, stop it with nothing new saved. Under
 * train.precision fp16 a non-finite step is a gradient overflow instead: the loss scale backs off
 * (src/train/loss_scale.ts) and the run goes on.
 *
 * Data parallelism (`group`, src/dist): each rank trains on its rows of every global batch of
 * train.batchSize × worldSize rows (× gradAccum), its noise drawn as one process of the global
 * batch draws it, and the gradients are summed over the ranks once a step (optimizerStep), so every
 * rank applies the same update and keeps the same weights. Every decision is the same on every rank:
 * the loss is the global batch's, a non-finite step is seen by all, and a stop (a signal on any
 * rank) is a vote after each step and after each evaluation. Evaluation runs on every rank over its
 * rows and sums over the ranks. Rank 0 alone writes metrics.jsonl and the checkpoints (the other
 * ranks wait for its checkpoint to be written), and every rank resumes from the same checkpoint.
 */
import { appendFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Backend } from '../backend/backend.js';
import { latestCheckpoint, loadCheckpoint, saveCheckpoint, stepDirName } from '../checkpoint/checkpoint.js';
import { type InitFrom, initParams } from '../checkpoint/init_from.js';
import { flopsPerToken } from '../config/model-size.js';
import type { TrainConfig } from '../config/schema.js';
import { type Collectives, SOLO, sumOverRanks } from '../dist/collectives.js';
import { allGatherShards } from '../dist/zero.js';
import { type BatchLoader, type LoaderState, conversationRows, createLoader, evalBatchCount } from '../data/loader.js';
import type { TokenSource } from '../data/source.js';
import type { Tokenizer } from '../data/tokenizer.js';
import { MdlmError, fail } from '../errors.js';
import type { LlamaModel } from '../model/llama.js';
import type { ParamFiller } from '../nn/params.js';
import type { Objective } from '../objectives/objective.js';
import type { AdamW } from '../optim/adamw.js';
import { learningRate } from '../optim/lr.js';
import { withFileErrors } from '../runtime/files.js';
import type { Tensor } from '../tensor.js';
import { evaluateModel } from './evaluate.js';
import { type MemoryBreakdown, describeMemory } from './memory.js';
import { METRICS_FILE, type ResumeMode, type RunDir, type RunDirOptions, openRunDir } from './run_dir.js';
import { resumeConflicts } from './resume.js';
import { type LossScaleChange, LossScaler } from './loss_scale.js';
import { setUpRun } from './setup.js';
import { Lookahead, optimizerStep } from './step.js';
import { EventLoopTurns } from './turns.js';

export interface TrainerOptions {
  readonly config: TrainConfig;
  readonly backend: Backend;
  readonly train: TokenSource;
  readonly val: TokenSource | undefined;
  readonly tokenizer: Tokenizer;
  /**
   * Continue from the newest checkpoint in config.out (latestCheckpoint): true (there must be
   * one), 'auto' (a new run when there is none) or false (a new run).
   */
  readonly resume: ResumeMode;
  /** A new run replaces an earlier run's checkpoints and metrics in config.out (else it refuses them). */
  readonly overwrite?: boolean;
  /** config.out already taken over by the caller (openRunDirOnRanks); run() takes it over itself otherwise. */
  readonly runDir?: RunDir;
  /** Stop after this many steps of this invocation (for tests; the schedule still spans train.steps). */
  readonly maxSteps?: number;
  readonly log: (line: string) => void;
  readonly onStep?: (m: StepMetrics) => void;
  /** Computes the initial parameter values (default: on this thread). */
  readonly fill?: ParamFiller;
  /** Aborted: finish the current step (or stop the evaluation), save a checkpoint, return. */
  readonly signal?: AbortSignal;
  /** Evaluation progress: the step, batches done and their total. */
  readonly onEval?: (p: EvalProgress) => void;
  /** The data-parallel ranks this trainer is one of (default: this process alone). */
  readonly group?: Collectives;
}

export interface EvalProgress {
  readonly step: number;
  readonly done: number;
  readonly total: number;
}

export interface StepMetrics {
  readonly step: number;
  readonly loss: number;
  readonly lr: number;
  readonly grad_norm: number;
  readonly tokens_per_s: number;
  readonly skipped?: boolean;
  /** train.precision fp16: the loss scale the step ran with. */
  readonly loss_scale?: number;
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
  /** Stopped by the signal (its reason is the signal's). */
  readonly interrupted: boolean;
}

interface SavedTrainerState {
  step: number;
  loader: LoaderState;
  tokens: number;
  seed: number;
  /** The ranks the run had (absent: saved by one process). */
  worldSize?: number;
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
  /** Periodic saves that failed since the last one that did not. */
  private failedSaves = 0;
  private readonly memory: MemoryBreakdown;
  /** Dynamic loss scaling (train.precision fp16), else null. */
  private readonly lossScaler: LossScaler | null;
  readonly group: Collectives;

  constructor(private readonly opts: TrainerOptions) {
    const cfg = opts.config;
    this.cfg = cfg;
    const group = opts.group ?? SOLO;
    this.group = group;
    const place = { rank: group.rank, worldSize: group.worldSize };
    if (group.worldSize > 1 && cfg.train.precision === 'fp8') {
      fail('BAD_CONFIG', `train.precision fp8 runs in one process: its scaling state (amax histories) is per process and not yet reduced over ${group.worldSize} ranks; use train.precision bf16 (or auto) with several ranks`);
    }
    const tok = opts.tokenizer;
    if (cfg.model.vocabSize < tok.vocabSize) {
      fail('BAD_CONFIG', `model.vocabSize ${cfg.model.vocabSize} is smaller than the ${tok.name} tokenizer's ${tok.vocabSize} ids; raise it (e.g. to ${Math.ceil(tok.vocabSize / 64) * 64})`);
    }
    const maskId = this.maskId();
    // Every run evaluates at its end: a validation split too small for one batch fails now, not
    // after the training it would cost.
    if (opts.val) evalBatchCount(opts.val, { seqLen: cfg.model.seqLen, batchSize: cfg.train.batchSize, ...conversationRows(cfg), ...place });
    const run = setUpRun(cfg, opts.backend, { maskId, place, ...(opts.fill ? { fill: opts.fill } : {}) });
    this.objective = run.objective;
    this.memory = run.memory;
    this.model = run.model;
    this.optimizer = run.optimizer;
    this.loader = createLoader(opts.train, { seqLen: cfg.model.seqLen, batchSize: cfg.train.batchSize, seed: cfg.train.seed, mode: cfg.data.mode, ...conversationRows(cfg), ...place });
    this.batches = new Lookahead(() => this.loader.next(), () => this.loader.state());
    this.metricsPath = join(cfg.out, METRICS_FILE);
    this.lossScaler = cfg.train.precision === 'fp16' ? new LossScaler(cfg.train.fp16) : null;
  }

  /** The [MASK] id: the config's, which must not be an id the tokenizer produces (except its own mask). */
  private maskId(): number {
    const id = this.cfg.objective.maskTokenId;
    if (this.cfg.objective.kind === 'ar') return id; // unused
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
      `compute: ${(fpt / 1e6).toFixed(1)} MFLOP per token; ${this.model.dtype} activations ${(this.model.activationBytes / 2 ** 20).toFixed(1)} MiB on ${this.opts.backend.description}${this.fp8Summary()}`,
      `memory: about ${describeMemory(this.memory)}${this.optimizer.shard.size < this.optimizer.shard.total ? ` a rank (train.zero 1: the AdamW state sharded over ${this.group.worldSize} ranks)` : ''}`,
      `objective: ${this.objective.name}; batch ${this.cfg.train.batchSize} × ${m.seqLen} × accum ${this.cfg.train.gradAccum}${this.group.worldSize > 1 ? ` × ${this.group.worldSize} ranks` : ''}`,
    ].join('\n');
  }

  /** What describe() says of FP8: which blocks run their GEMMs in it, and how they are scaled. */
  private fp8Summary(): string {
    const t = this.cfg.train;
    if (t.precision !== 'fp8') return '';
    const n = this.cfg.model.nLayers;
    return `; FP8 GEMMs in blocks ${t.fp8.keepFirst} to ${n - 1 - t.fp8.keepLast} of ${n} (${t.fp8.scaling} scaling${this.opts.backend.name === 'cuda' ? '' : ', emulated'})`;
  }

  /** A row of metrics.jsonl (rank 0's: the others' rows would be the same). */
  private writeMetric(obj: object): void {
    if (this.group.rank !== 0) return;
    withFileErrors({ path: this.metricsPath, action: 'append to', flag: '--out' }, () => appendFileSync(this.metricsPath, `${JSON.stringify(obj)}\n`));
  }

  /** Restore parameters, optimizer state, step and data cursor from a checkpoint (default: the newest in config.out). */
  async restore(latest: { dir: string; step: number } | null = latestCheckpoint(this.cfg.out)): Promise<boolean> {
    if (!latest) return false;
    const ck = loadCheckpoint(latest.dir, { model: this.cfg.model });
    const state = ck.trainerState as SavedTrainerState;
    const conflicts = resumeConflicts(state.config, this.resumedBatch(state, latest.dir));
    if (conflicts.length > 0) {
      fail('BAD_CONFIG', `${latest.dir} was saved by a run with other settings (${conflicts.join('; ')}); resume with the saved values (as --field value flags), or start a new run (--overwrite or another --out)`);
    }
    this.model.loadParams(ck.tensors, latest.dir);
    const b = this.opts.backend;
    // The moments are saved whole: this rank takes its shard's range of them (any train.zero, any number of ranks).
    const { offset, size, total } = this.optimizer.shard;
    for (const [name, dst] of [['m', this.optimizer.m], ['v', this.optimizer.v]] as const) {
      const t = ck.optimizer[name];
      if (!t || !(t.data instanceof Float32Array) || t.data.length !== total) fail('BAD_FILE', `${latest.dir}: optimizer state '${name}' is missing or has the wrong size`);
      b.upload(dst, t.data.subarray(offset, offset + size));
    }
    const fp8 = this.model.fp8;
    if (fp8 && fp8.tables.length > 0) {
      const tables: Record<string, Float32Array> = {};
      for (const { name } of fp8.tables) {
        const t = ck.optimizer[name];
        if (t?.data instanceof Float32Array) tables[name] = t.data;
      }
      // A checkpoint of a run in another precision has no FP8 state: the scales start afresh.
      if (Object.keys(tables).length > 0) fp8.restore(tables, latest.dir);
      else this.opts.log(`${latest.dir} holds no FP8 scaling state (saved in another train.precision); the FP8 scales start afresh`);
    }
    if (this.lossScaler) {
      // A checkpoint of a run in another precision has no loss scale: it starts at train.fp16.initialScale.
      if (state.lossScale !== undefined) this.lossScaler.restore(state.lossScale, latest.dir);
      else this.opts.log(`${latest.dir} holds no loss scale (saved in another train.precision); it starts at ${this.lossScaler.scale}`);
    }
    this.step = state.step;
    this.tokens = state.tokens;
    this.loader.restore(state.loader);
    this.batches.reset();
    this.opts.log(`resumed from ${latest.dir} at step ${this.step}`);
    return true;
  }

  /**
   * This run's config as the resume check compares it: a run may resume on another number of
   * ranks when its global batch (train.batchSize × ranks) is the checkpoint's, and then takes the
   * checkpoint's train.batchSize for the check (every draw is keyed by the global batch's rows and
   * the data cursor counts global batches, so the run goes on as it would have). Another global
   * batch is refused.
   */
  private resumedBatch(state: SavedTrainerState, dir: string): TrainConfig {
    const savedRanks = state.worldSize ?? 1;
    const ranks = this.group.worldSize;
    if (savedRanks === ranks) return this.cfg;
    const savedBatch = (state.config as { train?: { batchSize?: unknown } } | undefined)?.train?.batchSize;
    const batch = this.cfg.train.batchSize;
    if (typeof savedBatch !== 'number' || savedBatch * savedRanks !== batch * ranks) {
      const global = Number(savedBatch) * savedRanks;
      const fits = Number.isInteger(global / ranks) ? `train.batchSize ${global / ranks} on ${ranks} rank(s), or ` : '';
      fail('BAD_CONFIG', `${dir} was saved by ${savedRanks} rank(s) of train.batchSize ${String(savedBatch)}, a global batch of ${global} rows; this run has ${ranks} rank(s) of ${batch} (${batch * ranks} rows). Resume with the same global batch (${fits}train.batchSize ${String(savedBatch)} on ${savedRanks} rank(s)), or start a new run (--overwrite or another --out)`);
    }
    return { ...this.cfg, train: { ...this.cfg.train, batchSize: savedBatch } };
  }

  /** Initialise parameters from an --init-from checkpoint (src/checkpoint/init_from.ts), whose model the config took. */
  initFrom(init: InitFrom): void {
    this.model.loadParams(initParams(init, this.cfg.model, this.opts.log), init.dir);
    this.opts.log(`initialised parameters from ${init.dir}`);
  }

  /**
   * Write a checkpoint of the current state and return its directory. Rank 0 writes it; every rank
   * queues the deferred update alike (flush), so the ranks stay in step.
   */
  async save(): Promise<string> {
    const b = this.opts.backend;
    this.optimizer.flush();
    await b.sync();
    // Sharded moments and masters (train.zero 1) are gathered whole, every rank taking part, so the checkpoint
    // is the one an unsharded run writes and resumes on any number of ranks and any train.zero.
    const { shard } = this.optimizer;
    const whole = async (t: Tensor): Promise<Float32Array> =>
      shard.size < shard.total ? allGatherShards(this.group, b, t, shard) : ((await b.download(t)) as Float32Array);
    const m = await whole(this.optimizer.m);
    const v = await whole(this.optimizer.v);
    const store = this.model.store;
    const values = store.masterShard.size < store.size ? await allGatherShards(this.group, b, store.value, store.masterShard) : undefined;
    if (this.group.rank !== 0) return join(this.cfg.out, stepDirName(this.step));
    const masters = values ?? ((await b.download(store.value)) as Float32Array);
    const tensors: Record<string, Float32Array> = {};
    for (const p of store.list) tensors[p.name] = masters.slice(p.offset, p.offset + p.grad.size);
    const fp8: Record<string, Float32Array> = {};
    for (const { name, tensor } of this.model.fp8?.tables ?? []) fp8[name] = (await b.download(tensor)) as Float32Array;
    const trainerState: SavedTrainerState = {
      step: this.step, loader: this.batches.state(), tokens: this.tokens, seed: this.cfg.train.seed, config: this.cfg,
      ...(this.group.worldSize > 1 ? { worldSize: this.group.worldSize } : {}),
      ...(this.lossScaler ? { lossScale: this.lossScaler.save() } : {}),
    };
    return saveCheckpoint(
      this.cfg.out,
      { config: this.cfg, tensors, optimizer: { m, v, ...fp8 }, trainerState, tokenizerFiles: this.opts.tokenizer.files() },
      { keepLast: this.cfg.train.keepCheckpoints, eosTokenId: this.opts.tokenizer.eosId },
    );
  }

  /**
   * Mean loss over the fixed validation batches (AR: CE; mdlm: ELBO over fixed noise levels),
   * reporting progress to onEval; stops between batches when the signal is aborted (rejecting
   * with its reason).
   */
  async evaluate(): Promise<EvalMetrics | undefined> {
    const val = this.opts.val;
    if (!val) return undefined;
    this.optimizer.flush();
    const cfg = this.cfg;
    const step = this.step;
    const onEval = this.opts.onEval;
    // Over several ranks a signal stops the run at the vote after the evaluation, not within it:
    // every rank runs the evaluation's collectives to their end.
    const signal = this.group.worldSize === 1 ? this.opts.signal : undefined;
    const e = await evaluateModel(this.model, this.objective, val, {
      seqLen: cfg.model.seqLen, batchSize: cfg.train.batchSize, mode: cfg.data.mode, ...conversationRows(cfg), maxBatches: cfg.train.evalBatches, group: this.group,
      ...(onEval ? { onBatch: (done: number, total: number) => onEval({ step, done, total }) } : {}),
      ...(signal ? { signal } : {}),
    });
    return { step, val_loss: e.loss, val_ppl: e.ppl, val_tokens: e.tokens };
  }

  /** Take over config.out (unless the caller did: runDir), resume if asked, and train to train.steps (or maxSteps more). */
  async run(): Promise<TrainResult> {
    const runDir = this.opts.runDir ?? (await openRunDirOnRanks(this.cfg.out, { resume: this.opts.resume, overwrite: this.opts.overwrite ?? false, log: this.opts.log }, this.group));
    try {
      if (runDir.resumeFrom) await this.restore(runDir.resumeFrom);
      return await this.train();
    } finally {
      if (!this.opts.runDir) runDir.release();
    }
  }

  private async train(): Promise<TrainResult> {
    const cfg = this.cfg;
    const t = cfg.train;
    const first = this.step;
    const end = Math.min(t.steps, this.opts.maxSteps === undefined ? Infinity : this.step + this.opts.maxSteps);
    const losses: number[] = [];
    const tokensPerStep = t.batchSize * cfg.model.seqLen * t.gradAccum * this.group.worldSize;
    const aborted = (): boolean => this.opts.signal?.aborted ?? false;
    // Alone, the signal is read wherever it matters; over several ranks, at the votes every rank
    // takes together (after each step and each evaluation), so that all stop at the same step.
    const alone = this.group.worldSize === 1;
    let voted = false;
    const stopping = (): boolean => (alone ? aborted() : voted);
    const turns = new EventLoopTurns();
    let lastEval: EvalMetrics | undefined;
    let checkpoint: string | undefined;
    let skipped = 0;
    const schedule = { lr: t.lr, minLr: t.minLr, warmupSteps: t.warmupSteps, totalSteps: t.steps, decay: t.decay, wsdDecayFraction: t.wsdDecayFraction };
    const scaler = this.lossScaler;
    this.applyLossScale();
    if (!alone) voted = await this.voteToStop();
    if (stopping()) return { step: this.step, losses, lastEval, checkpoint, interrupted: true };
    if (this.step >= end) this.opts.log(`step ${this.step} already reaches train.steps ${t.steps}: nothing to train (raise train.steps to go on)`);
    while (this.step < end) {
      const started = performance.now();
      const lr = learningRate(schedule, this.step);
      // Under loss scaling a non-finite step is an overflow the scaler answers, never an error.
      const { loss, gradNorm, finite, stop } = await optimizerStep(this, this.batches, this.step, t.gradAccum, lr, scaler ? 'skip' : t.nonFinite, aborted);
      voted = stop;
      const scale = scaler?.scale;
      this.step++;
      this.tokens += tokensPerStep;
      losses.push(loss);
      const seconds = (performance.now() - started) / 1000;
      const m: StepMetrics = {
        step: this.step, loss, lr, grad_norm: gradNorm, tokens_per_s: tokensPerStep / seconds, ...(finite ? {} : { skipped: true }), ...(scale === undefined ? {} : { loss_scale: scale }),
      };
      this.writeMetric(m);
      this.opts.onStep?.(m);
      if (scaler) this.scaleChanged(scaler.update(finite, this.step), scale!);
      await turns.maybe();
      const last = this.step === end;
      skipped = finite || scaler ? 0 : skipped + 1;
      if (skipped > 0) this.checkSkipped(skipped, this.step - first, last || stopping());
      let saved = false;
      // An overflowed step changed nothing but the loss scale: a checkpoint of it is as good as any.
      if ((t.saveEvery > 0 && this.step % t.saveEvery === 0 && (finite || scaler)) || last || stopping()) {
        checkpoint = (await this.saveOrRetry(last || stopping())) ?? checkpoint;
        saved = true;
      }
      if (!stopping() && ((t.evalEvery > 0 && this.step % t.evalEvery === 0) || last)) {
        lastEval = (await this.evaluateAndLog()) ?? lastEval;
        if (!alone) voted = await this.voteToStop();
      }
      if (stopping()) {
        if (!saved) checkpoint = (await this.saveOrRetry(true)) ?? checkpoint;
        return { step: this.step, losses, lastEval, checkpoint, interrupted: true };
      }
    }
    return { step: this.step, losses, lastEval, checkpoint, interrupted: false };
  }

  /** Whether a signal reached any rank: every rank votes and learns the result. */
  private async voteToStop(): Promise<boolean> {
    const [votes] = await sumOverRanks(this.group, [this.opts.signal?.aborted ? 1 : 0]);
    return votes! > 0;
  }

  /**
   * The loss scale on the device: the loss gradient's (with 1/(gradAccum · worldSize), so the
   * gradients accumulated and summed over the ranks are of the global batch's mean loss) and
   * grad_norm's 1/scale; 1 without loss scaling.
   */
  private applyLossScale(): void {
    const scale = this.lossScaler?.scale ?? 1;
    this.model.setLossScale(scale / (this.cfg.train.gradAccum * this.group.worldSize));
    if (this.lossScaler) this.optimizer.setLossScale(scale);
  }

  /** After a step that ran at loss scale `was`: the new scale on the device, and a line in the log. */
  private scaleChanged(change: LossScaleChange, was: number): void {
    if (!change) return;
    this.applyLossScale();
    const now = this.lossScaler!.scale;
    this.opts.log(change === 'backoff'
      ? `step ${this.step}: the gradients overflowed at loss scale ${was}; the update was skipped and the scale backs off to ${now}`
      : `step ${this.step}: ${this.cfg.train.fp16.growthInterval} steps in a row without an overflow; the loss scale grows to ${now}`);
  }

  /** Evaluate, write and log the result; undefined without validation data or when the signal stopped it. */
  private async evaluateAndLog(): Promise<EvalMetrics | undefined> {
    let e: EvalMetrics | undefined;
    try {
      e = await this.evaluate();
    } catch (err) {
      if (this.opts.signal?.aborted && err === this.opts.signal.reason) return undefined;
      throw err;
    }
    if (e) {
      this.writeMetric(e);
      this.opts.log(`step ${this.step}: val_loss ${e.val_loss.toFixed(4)} (ppl${this.objective.name === 'mdlm' ? ' bound' : ''} ${e.val_ppl.toFixed(2)})`);
    }
    return e;
  }

  /**
   * Save, and log it. A filesystem failure (IO_ERROR) of a periodic save is logged and the run
   * goes on, to try again at the next interval; a second one in a row, or one of the `final`
   * save, stops the run, naming the newest checkpoint left. Over several ranks the others wait for
   * rank 0's checkpoint and learn whether it was written, so every rank takes the same way.
   */
  private async saveOrRetry(final: boolean): Promise<string | undefined> {
    let dir: string | undefined;
    let error: unknown;
    try {
      dir = await this.save();
    } catch (e) {
      error = e;
    }
    if (this.group.worldSize > 1) {
      const written = Float32Array.of(error === undefined ? 1 : 0);
      await this.group.broadcast(written, 0);
      if (written[0] === 0 && error === undefined) error = new MdlmError('IO_ERROR', `rank 0 could not save step ${this.step} (its log says why)`);
    }
    if (error === undefined) {
      this.failedSaves = 0;
      this.opts.log(`saved ${dir}`);
      return dir;
    }
    const e = error;
    if (!(e instanceof MdlmError) || e.code !== 'IO_ERROR') throw e;
    this.failedSaves++;
    if (final || this.failedSaves > 1) {
      const kept = latestCheckpoint(this.cfg.out);
      throw new MdlmError('IO_ERROR', `${e.message}. The run stopped at step ${this.step} without saving it; ${kept ? `${kept.dir} is the newest checkpoint (continue from it with --resume)` : 'no checkpoint was saved'}`);
    }
    this.opts.log(`could not save step ${this.step}, training goes on and tries again at the next save: ${e.message}`);
    return undefined;
  }

  /**
   * Stop (BAD_CONFIG, nothing saved) after train.maxSkippedSteps non-finite steps in a row, or
   * when the run ends (`ending`) with every step of this invocation skipped.
   */
  private checkSkipped(skipped: number, run: number, ending: boolean): void {
    const max = this.cfg.train.maxSkippedSteps;
    if (skipped < max && !(ending && skipped === run)) return;
    const kept = latestCheckpoint(this.cfg.out);
    fail(
      'BAD_CONFIG',
      `${skipped < max ? `all ${run} steps` : `${skipped} steps in a row`} (through step ${this.step}) had a non-finite loss or gradient norm and were skipped (train.nonFinite skip, train.maxSkippedSteps ${max}); the run stopped and saved nothing new${kept ? ` (${kept.dir} is the newest checkpoint)` : ''}. Lower train.lr, check the data and the model's initialisation, or train.nonFinite stop to stop at the first`,
    );
  }

  destroy(): void {
    this.optimizer.destroy();
    this.model.destroy();
  }
}

/**
 * config.out taken over by the ranks of `group` for one run: rank 0 takes it over (openRunDir: the
 * lock, leftovers, the resume decision, --overwrite) and tells the others which checkpoint to
 * continue from, which every rank reads from the same directory (a filesystem all ranks see). When
 * rank 0 fails, every rank fails.
 */
export async function openRunDirOnRanks(out: string, opts: RunDirOptions, group: Collectives): Promise<RunDir> {
  if (group.worldSize === 1) return openRunDir(out, opts);
  let dir: RunDir | undefined;
  let failure: unknown;
  if (group.rank === 0) {
    try {
      dir = openRunDir(out, opts);
    } catch (e) {
      failure = e;
    }
  }
  // The step to resume at (−1: a new run, −2: rank 0 failed), as f64 bytes.
  const decision = Float64Array.of(failure !== undefined ? -2 : (dir?.resumeFrom?.step ?? -1));
  await group.broadcast(new Float32Array(decision.buffer), 0);
  if (failure !== undefined) throw failure;
  if (dir) return dir;
  const step = decision[0]!;
  if (step === -2) fail('BAD_ARGUMENT', `rank ${group.rank}: rank 0 could not take over ${out} for the run (its error says why)`);
  return { path: out, resumeFrom: step < 0 ? null : { dir: join(out, stepDirName(step)), step }, release: () => {} };
}
