/** `mdlm train`: resolve the config, open the data, build the trainer on the chosen backend, run. */
import { Command } from 'commander';
import { SingleBar } from 'cli-progress';
import { configFields, resolveConfig } from '../config/load.js';
import { fail } from '../errors.js';
import type { Backend } from '../backend/backend.js';
import { WebGpuBackend } from '../backend/webgpu/webgpu.js';
import { createBackend, parseBackendChoice } from '../runtime/backends.js';
import { parallelFiller } from '../runtime/parallel_init.js';
import { openRunData } from '../train/data.js';
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
  const software = backend.name === 'cpu' || (backend instanceof WebGpuBackend && backend.adapter.architecture === 'software');
  return software ? 'nano' : 'small';
}

function fmtEta(seconds: number): string {
  if (!Number.isFinite(seconds)) return '?';
  const s = Math.round(seconds);
  return s >= 3600 ? `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}m` : s >= 60 ? `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s` : `${s}s`;
}

export function trainCommand(): Command {
  return new Command('train')
    .description('Train a masked-diffusion (mdlm) or autoregressive (ar) language model')
    .option('--config <file>', 'YAML or JSON config file')
    .option('--preset <name>', 'nano | tiny | small | llama-124m | llama-1.3b (default: small on a GPU, nano on the CPU or a software adapter)')
    .option('--resume', 'continue from the newest complete checkpoint in --out')
    .option('--init-from <dir>', 'initialise parameters from a Hugging Face / mdlm checkpoint directory')
    .option('--fields', 'list every config field (usable as --section.field VALUE) and exit')
    .addHelpText('after', '\nShortcuts: --objective ar|mdlm, --backend auto|cpu|webgpu|cuda, --steps N, --out DIR.\nAny config field can be set as --section.field VALUE, e.g. --model.dModel 256 --train.lr 3e-4 (see --fields).')
    .allowUnknownOption(true)
    .allowExcessArguments(true)
    .action(async (o: { config?: string; preset?: string; resume?: boolean; initFrom?: string; fields?: boolean }, cmd: Command) => {
      if (o.fields) {
        for (const f of configFields()) console.log(`--${f.path.padEnd(28)} ${f.type}${f.values ? ` (${f.values.join('|')})` : ''}, default ${JSON.stringify(f.default)}: ${f.description}`);
        return;
      }
      const overrides = parseFieldFlags(cmd.args);
      const log = (line: string): void => console.error(line);
      let preset = o.preset;
      let backend: Backend;
      if (preset === undefined && o.config === undefined) {
        // No model chosen: size the default to the device, so `mdlm train` finishes in minutes anywhere.
        backend = await createBackend(parseBackendChoice(overrides.backend ?? 'auto'));
        preset = defaultPreset(backend);
        log(`no --preset or --config: using preset '${preset}' for ${backend.name} (${backend.description}); pass --preset to choose`);
      }
      const config = resolveConfig({ ...(preset !== undefined ? { preset } : {}), ...(o.config ? { file: o.config } : {}), overrides });
      backend ??= await createBackend(config.backend);
      const data = await openRunData(config, log);
      const ac = new AbortController();
      const onSigint = (): void => {
        if (ac.signal.aborted) process.exit(130);
        log('\ninterrupt: finishing this step and saving a checkpoint (Ctrl-C again to quit now)');
        ac.abort();
      };
      process.on('SIGINT', onSigint);
      const bar = process.stderr.isTTY ? new SingleBar({ format: 'step {value}/{total} |{bar}| loss {loss} | lr {lr} | {tps} tok/s | ETA {eta_h}', hideCursor: true }) : null;
      const started = performance.now();
      let first = -1;
      const trainer = new Trainer({
        config, backend, train: data.train, val: data.val, tokenizer: data.tokenizer, resume: o.resume ?? false, log, signal: ac.signal, fill: parallelFiller(),
        onStep: (m: StepMetrics) => {
          if (first < 0) first = m.step - 1;
          const rate = (m.step - first) / ((performance.now() - started) / 1000);
          const eta = fmtEta((config.train.steps - m.step) / rate);
          const fields = { loss: m.loss.toFixed(4), lr: m.lr.toExponential(2), tps: Math.round(m.tokens_per_s), eta_h: eta };
          if (bar) bar.update(m.step, fields);
          else if (m.step % config.train.logEvery === 0 || m.step === config.train.steps) log(`step ${m.step}/${config.train.steps} loss ${fields.loss} lr ${fields.lr} ${fields.tps} tok/s ETA ${eta}`);
        },
      });
      try {
        log(`data: ${data.description}; tokenizer ${data.tokenizer.name} (${data.tokenizer.vocabSize} ids)`);
        log(trainer.describe());
        if (o.initFrom) trainer.initFrom(o.initFrom);
        bar?.start(config.train.steps, 0, { loss: '-', lr: '-', tps: 0, eta_h: '?' });
        const result = await trainer.run();
        bar?.stop();
        if (result.lastEval) log(`final: step ${result.step} val_loss ${result.lastEval.val_loss.toFixed(4)} ppl${config.objective.kind === 'mdlm' ? ' bound' : ''} ${result.lastEval.val_ppl.toFixed(2)}`);
        if (result.interrupted) process.exitCode = 130;
      } finally {
        bar?.stop();
        process.off('SIGINT', onSigint);
        trainer.destroy();
        backend.destroy();
      }
    });
}
