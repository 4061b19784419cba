/**
 * `mdlm train`: resolve the config, join the job when the process is one of several ranks (the
 * torchrun or SLURM environment, src/dist), open the data, build the trainer on the chosen backend,
 * run. `--nproc-per-node N` starts N such ranks on this host instead (src/cli/launch.ts).
 */
import { Command } from 'commander';
import { SingleBar } from 'cli-progress';
import type { InitFrom } from '../checkpoint/init_from.js';
import { configFields } from '../config/load.js';
import { resolveRunConfig } from '../config/run.js';
import type { TrainConfig } from '../config/schema.js';
import type { Tokenizer } from '../data/tokenizer.js';
import { DEFAULT_DIST_TIMEOUT_S, type World, joinWorld } from '../dist/world.js';
import { distEnv } from '../dist/env.js';
import { fail } from '../errors.js';
import type { Backend } from '../backend/backend.js';
import { WebGpuBackend } from '../backend/webgpu/webgpu.js';
import { createBackend, isSoftwareAdapter, parseBackendChoice } from '../runtime/backends.js';
import { parallelFiller } from '../runtime/parallel_init.js';
import { type RunData, openRunData } from '../train/data.js';
import type { ResumeMode, RunDir } from '../train/run_dir.js';
import { type StepMetrics, Trainer, openRunDirOnRanks } from '../train/trainer.js';
import { exitWithLauncher, launchWorkers } from './launch.js';
import { intOption } from './options.js';

/** Shortcut flags for the most used fields; every field also has its dotted --section.field flag. */
const SHORTCUTS: Record<string, string> = {
  objective: 'objective.kind',
  backend: 'backend',
  steps: 'train.steps',
  out: 'out',
};

/** Split `--a.b value` / `--a.b=value` pairs (config fields) from the rest. */
export function parseFieldFlags(args: readonly string[]): Record<string, string> {
  const known = new Set(configFields().map((f) => f.path));
  const out: Record<string, string> = {};
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!;
    if (!a.startsWith('--')) fail('BAD_ARGUMENT', `unexpected argument '${a}'`);
    const eq = a.indexOf('=');
    const key = a.slice(2, eq < 0 ? undefined : eq);
    const path = SHORTCUTS[key] ?? key;
    if (!known.has(path)) fail('BAD_ARGUMENT', `unknown option '--${key}'; run 'mdlm train --help' for the options and 'mdlm train --fields' for every config field`);
    let value: string | undefined = eq < 0 ? undefined : a.slice(eq + 1);
    if (value === undefined) {
      const next = args[i + 1];
      const field = configFields().find((f) => f.path === path)!;
      if (field.type === 'boolean' && (next === undefined || next.startsWith('--'))) value = 'true';
      else if (next === undefined) fail('BAD_ARGUMENT', `option '--${key}' needs a value`);
      else {
        value = next;
        i++;
      }
    }
    out[path] = value;
  }
  return out;
}

/**
 * `small` (≈10M parameters) where there is a real GPU; `nano` on the CPU or a software WebGPU
 * adapter (lavapipe: ~1 GFLOP/s, where `small` runs ~20 tokens/s and `nano` ~1000).
 */
export function defaultPreset(backend: Backend): 'nano' | 'small' {
  const software = backend.name === 'cpu' || (backend instanceof WebGpuBackend && isSoftwareAdapter(backend.adapter));
  return software ? 'nano' : 'small';
}

function fmtEta(seconds: number): string {
  if (!Number.isFinite(seconds)) return '?';
  const s = Math.round(seconds);
  return s >= 3600 ? `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}m` : s >= 60 ? `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s` : `${s}s`;
}

/** What a signal stops a run with: 128 + the signal's number, as a shell reports a process it killed. */
const SIGNAL_EXIT = { SIGINT: 130, SIGTERM: 143 } as const;
type StopSignal = keyof typeof SIGNAL_EXIT;

/**
 * SIGINT and SIGTERM abort the returned signal (reason: the signal's name): the run finishes its
 * step, saves and returns. The handlers go with the first signal, so a second one takes the
 * default action and ends the process at once, even inside a long step.
 */
export function stopOnSignals(log: (line: string) => void): { signal: AbortSignal; dispose: () => void } {
  const ac = new AbortController();
  const names = Object.keys(SIGNAL_EXIT) as StopSignal[];
  const dispose = (): void => {
    for (const name of names) process.off(name, onSignal);
  };
  function onSignal(name: NodeJS.Signals): void {
    dispose();
    log(`\n${name}: finishing this step and saving a checkpoint (${name === 'SIGINT' ? 'Ctrl-C again' : 'a second signal'} quits at once)`);
    ac.abort(name);
  }
  for (const name of names) process.on(name, onSignal);
  return { signal: ac.signal, dispose };
}

function parseResume(v: string | boolean | undefined): ResumeMode {
  if (v === undefined) return false;
  if (v === true || v === 'auto') return v;
  return fail('BAD_ARGUMENT', `--resume takes no value, or 'auto' (continue if --out holds a checkpoint, else start a new run); got '${v}'`);
}

interface TrainFlags {
  config?: string;
  preset?: string;
  resume?: string | boolean;
  overwrite?: boolean;
  initFrom?: string;
  fields?: boolean;
  nprocPerNode?: number;
  distTimeout: number;
}

/** The launcher's own flags, dropped from the arguments it hands its workers. */
function workerArgs(args: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < args.length; i++) {
    if (args[i] === '--nproc-per-node') i++;
    else if (!args[i]!.startsWith('--nproc-per-node=')) out.push(args[i]!);
  }
  return out;
}

/** How long preparing the data on rank 0 may take while the other ranks wait for it. */
const DATA_WAIT_MS = 24 * 3600 * 1000;

/**
 * The run's data on every rank: rank 0 opens it first (preparing <out>/data when needed) while the
 * others wait, then they open what it prepared (a filesystem every rank sees).
 */
async function openRunDataOnRanks(config: TrainConfig, log: (line: string) => void, world: World): Promise<RunData> {
  const store = world.store;
  if (!store) return openRunData(config, log);
  const key = 'mdlm/data';
  if (world.env.rank === 0) {
    try {
      const data = await openRunData(config, log);
      await store.set(key, Buffer.from('ok'), world.env.worldSize - 1);
      return data;
    } catch (e) {
      await store.set(key, Buffer.from(e instanceof Error ? e.message : String(e)), world.env.worldSize - 1);
      throw e;
    }
  }
  const outcome = (await store.get(key, "waiting for rank 0 to open the run's data", DATA_WAIT_MS)).toString();
  if (outcome !== 'ok') fail('BAD_CONFIG', `rank ${world.env.rank}: rank 0 could not open the run's data: ${outcome}`);
  return openRunData(config, log);
}

export function trainCommand(): Command {
  return new Command('train')
    .description('Train a masked-diffusion (mdlm) or autoregressive (ar) language model')
    .option('--config <file>', 'YAML or JSON config file')
    .option('--preset <name>', 'nano | tiny | small | llama-124m | llama-1.3b (default: small on a GPU, nano on the CPU or a software adapter)')
    .option('--resume [auto]', "continue from the newest checkpoint in --out (the one its 'latest' names); an error when there is none. --resume auto: start a new run when there is none")
    .option('--overwrite', 'start a new run in an --out that holds an earlier one, deleting its checkpoints and metrics first (without it, such an --out is refused)')
    .option('--init-from <dir>', "initialise parameters from a Hugging Face / mdlm checkpoint directory, or a run's --out (its newest checkpoint)")
    .option('--fields', 'list every config field (usable as --section.field VALUE) and exit')
    .option('--nproc-per-node <n>', 'start N worker processes on this host, the ranks of one data-parallel run (see the README: Launching)', intOption('--nproc-per-node', 1))
    .option('--dist-timeout <seconds>', 'several ranks: how long a rank waits for the others (a collective, rank 0\'s checkpoint) before it fails', intOption('--dist-timeout', 1), DEFAULT_DIST_TIMEOUT_S)
    .addHelpText(
      'after',
      [
        '',
        'Shortcuts: --objective ar|mdlm, --backend auto|cpu|webgpu|cuda, --steps N, --out DIR.',
        'Any config field can be set as --section.field VALUE, e.g. --model.dModel 256 --train.lr 3e-4 (see --fields).',
        '',
        'Run directory: a new run refuses an --out holding checkpoints or metrics.jsonl (--resume or --overwrite);',
        'one run at a time per --out (its .lock); leftovers of interrupted saves are removed at the start.',
        'Ctrl-C (SIGINT) or SIGTERM: the step finishes, a checkpoint is saved, exit 130 (SIGINT) or 143 (SIGTERM);',
        'a second signal quits at once. Errors exit 1.',
        '',
        'Several ranks (data parallel): --nproc-per-node N on one host; across hosts, every process started with',
        "torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) or by srun joins its job.",
        'The global batch is train.batchSize × ranks (× train.gradAccum); rank 0 logs, writes metrics and checkpoints.',
      ].join('\n'),
    )
    .allowUnknownOption(true)
    .allowExcessArguments(true)
    .action(async (o: TrainFlags, cmd: Command) => {
      if (o.fields) {
        for (const f of configFields()) console.log(`--${f.path.padEnd(28)} ${f.type}${f.values ? ` (${f.values.join('|')})` : ''}, default ${JSON.stringify(f.default)}: ${f.description}`);
        return;
      }
      const resume = parseResume(o.resume);
      const overrides = parseFieldFlags(cmd.args);
      const env = distEnv();
      if (o.nprocPerNode !== undefined) {
        if (env.worldSize > 1) fail('BAD_ARGUMENT', `--nproc-per-node starts a job of its own, but this process is already rank ${env.rank} of ${env.worldSize} (${env.launcher === 'slurm' ? 'SLURM' : 'RANK and WORLD_SIZE are set'}); drop the flag`);
        process.exitCode = await launchWorkers({ nproc: o.nprocPerNode, script: process.argv[1]!, args: workerArgs(process.argv.slice(2)), log: (line) => console.error(line) });
        return;
      }
      if (env.worldSize > 1) exitWithLauncher(env.rank);
      // Rank 0 speaks for the job; the others print only their errors.
      const log = env.rank === 0 ? (line: string): void => console.error(line) : (): void => {};
      let preset = o.preset;
      let backend: Backend | undefined;
      if (preset === undefined && o.config === undefined) {
        // No model chosen: size the default to the device, so `mdlm train` finishes in minutes anywhere.
        backend = await createBackend(parseBackendChoice(overrides.backend ?? 'auto'), log, { localRank: env.localRank });
        preset = defaultPreset(backend);
        log(`no --preset or --config: using preset '${preset}' for ${backend.name} (${backend.description}); pass --preset to choose`);
      }
      let runDir: RunDir | undefined;
      let world: World | undefined;
      try {
        const { config, tokenizer, init } = await resolveRunConfig({ ...(preset !== undefined ? { preset } : {}), ...(o.config ? { file: o.config } : {}), overrides, ...(o.initFrom !== undefined ? { initFrom: o.initFrom } : {}), log });
        // Every rank of the job meets the others and checks that they all run this config.
        world = await joinWorld({ env, config, timeoutMs: o.distTimeout * 1000 });
        // The run directory before anything slow: a wrong --out fails in a second, not after data preparation.
        runDir = await openRunDirOnRanks(config.out, { resume, overwrite: o.overwrite ?? false, log }, world.group);
        backend ??= await createBackend(config.backend, log, { localRank: env.localRank });
        await train(config, backend, runDir, tokenizer, init, log, world);
        await world.close();
      } catch (e) {
        // A rank that fails leaves at once: the others' waits fail, naming it and why.
        world?.destroy(e instanceof Error ? e.message : String(e));
        throw e;
      } finally {
        runDir?.release();
        backend?.destroy();
      }
    });
}

/** The run itself: data, trainer, progress, signals; sets the exit code of a run a signal stopped. */
async function train(config: TrainConfig, backend: Backend, runDir: RunDir, tokenizer: Tokenizer, init: InitFrom | undefined, log: (line: string) => void, world: World): Promise<void> {
  const data = await openRunDataOnRanks(config, log, world);
  const lead = world.env.rank === 0;
  const bar = lead && process.stderr.isTTY ? new SingleBar({ format: 'step {value}/{total} |{bar}| {status}', hideCursor: true }) : null;
  const started = performance.now();
  let first = -1;
  let evalLogged = 0;
  const stop = stopOnSignals(log);
  const trainer = new Trainer({
    config, backend, train: data.train, val: data.val, tokenizer, resume: runDir.resumeFrom !== null, runDir, log, signal: stop.signal, fill: parallelFiller(), group: world.group,
    onStep: (m: StepMetrics) => {
      if (!lead) return;
      if (first < 0) first = m.step - 1;
      const rate = (m.step - first) / ((performance.now() - started) / 1000);
      const eta = fmtEta((config.train.steps - m.step) / rate);
      const fields = { loss: m.loss.toFixed(4), lr: m.lr.toExponential(2), tps: Math.round(m.tokens_per_s) };
      if (bar) bar.update(m.step, { status: `loss ${fields.loss} | lr ${fields.lr} | ${fields.tps} tok/s | ETA ${eta}` });
      else if (m.step % config.train.logEvery === 0 || m.step === config.train.steps) log(`step ${m.step}/${config.train.steps} loss ${fields.loss} lr ${fields.lr} ${fields.tps} tok/s ETA ${eta}`);
    },
    onEval: ({ step, done, total }) => {
      if (!lead) return;
      if (bar) bar.update(step, { status: `evaluating: batch ${done}/${total}` });
      else if (done === 0 || (done < total && performance.now() - evalLogged > 10_000)) {
        log(done === 0 ? `step ${step}: evaluating on ${total} validation batches` : `step ${step}: evaluated ${done}/${total} batches`);
        evalLogged = performance.now();
      }
    },
  });
  try {
    log(`data: ${data.description}; tokenizer ${data.tokenizer.name} (${data.tokenizer.vocabSize} ids)`);
    log(trainer.describe());
    if (init) trainer.initFrom(init);
    bar?.start(config.train.steps, 0, { status: '' });
    const result = await trainer.run();
    bar?.stop();
    if (result.interrupted) {
      // A rank the signal did not reach stopped with the others (their vote): as after Ctrl-C.
      const name = (stop.signal.aborted ? stop.signal.reason : 'SIGINT') as StopSignal;
      log(`stopped by ${name} at step ${result.step}${result.checkpoint ? `; ${result.checkpoint} is saved: continue with --resume` : ''}`);
      process.exitCode = SIGNAL_EXIT[name];
    } else if (result.lastEval) {
      log(`final: step ${result.step} val_loss ${result.lastEval.val_loss.toFixed(4)} ppl${config.objective.kind === 'mdlm' ? ' bound' : ''} ${result.lastEval.val_ppl.toFixed(2)}`);
    }
  } finally {
    bar?.stop();
    stop.dispose();
    trainer.destroy();
  }
}
