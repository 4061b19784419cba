/** `mdlm train`: resolve the config, open the data, build the trainer on the chosen backend, run. */
import { Command } from 'commander';
import { SingleBar } from 'cli-progress';
import type { InitFrom } from '../checkpoint/init_from.js';
import { configFields } from '../config/load.js';
import { resolveRunConfig } from '../config/run.js';
import type { TrainConfig } from '../config/schema.js';
import type { Tokenizer } from '../data/tokenizer.js';
import { fail } from '../errors.js';
import type { Backend } from '../backend/backend.js';
import { WebGpuBackend } from '../backend/webgpu/webgpu.js';
import { createBackend, isSoftwareAdapter, parseBackendChoice } from '../runtime/backends.js';
import { parallelFiller } from '../runtime/parallel_init.js';
import { openRunData } from '../train/data.js';
import { type ResumeMode, type RunDir, openRunDir } from '../train/run_dir.js';
import { type StepMetrics, Trainer } from '../train/trainer.js';

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
      const log = (line: string): void => console.error(line);
      let preset = o.preset;
      let backend: Backend | undefined;
      if (preset === undefined && o.config === undefined) {
        // No model chosen: size the default to the device, so `mdlm train` finishes in minutes anywhere.
        backend = await createBackend(parseBackendChoice(overrides.backend ?? 'auto'));
        preset = defaultPreset(backend);
        log(`no --preset or --config: using preset '${preset}' for ${backend.name} (${backend.description}); pass --preset to choose`);
      }
      let runDir: RunDir | undefined;
      try {
        const { config, tokenizer, init } = await resolveRunConfig({ ...(preset !== undefined ? { preset } : {}), ...(o.config ? { file: o.config } : {}), overrides, ...(o.initFrom !== undefined ? { initFrom: o.initFrom } : {}), log });
        // The run directory before anything slow: a wrong --out fails in a second, not after data preparation.
        runDir = openRunDir(config.out, { resume, overwrite: o.overwrite ?? false, log });
        backend ??= await createBackend(config.backend);
        await train(config, backend, runDir, tokenizer, init, log);
      } finally {
        runDir?.release();
        backend?.destroy();
      }
    });
}

/** The run itself: data, trainer, progress, signals; sets the exit code of a run a signal stopped. */
async function train(config: TrainConfig, backend: Backend, runDir: RunDir, tokenizer: Tokenizer, init: InitFrom | undefined, log: (line: string) => void): Promise<void> {
  const data = await openRunData(config, log);
  const bar = process.stderr.isTTY ? new SingleBar({ format: 'step {value}/{total} |{bar}| {status}', hideCursor: true }) : null;
  const started = performance.now();
  let first = -1;
  let evalLogged = 0;
  const stop = stopOnSignals(log);
  const trainer = new Trainer({
    config, backend, train: data.train, val: data.val, tokenizer, resume: runDir.resumeFrom !== null, runDir, log, signal: stop.signal, fill: parallelFiller(),
    onStep: (m: StepMetrics) => {
      if (first < 0) first = m.step - 1;
      const rate = (m.step - first) / ((performance.now() - started) / 1000);
      const eta = fmtEta((config.train.steps - m.step) / rate);
      const fields = { loss: m.loss.toFixed(4), lr: m.lr.toExponential(2), tps: Math.round(m.tokens_per_s) };
      if (bar) bar.update(m.step, { status: `loss ${fields.loss} | lr ${fields.lr} | ${fields.tps} tok/s | ETA ${eta}` });
      else if (m.step % config.train.logEvery === 0 || m.step === config.train.steps) log(`step ${m.step}/${config.train.steps} loss ${fields.loss} lr ${fields.lr} ${fields.tps} tok/s ETA ${eta}`);
    },
    onEval: ({ step, done, total }) => {
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
      const name = stop.signal.reason as StopSignal;
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
