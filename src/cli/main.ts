/**
 * The `mdlm` command line (bin/mdlm.js runs it). User errors, filesystem errors among them, print
 * one line `mdlm: CODE: message` without a stack and exit 1.
 */
import { readFileSync } from 'node:fs';
import { Command } from 'commander';
import { MdlmError } from '../errors.js';
import { fileError, isSystemError, syscallAction } from '../runtime/files.js';
import { benchCommand } from './bench.js';
import { chatCommand } from './chat.js';
import { dataCommand } from './data.js';
import { evalCommand } from './eval.js';
import { modelCommand } from './model.js';
import { probeCommand } from './probe.js';
import { rlCommand } from './rl.js';
import { sampleCommand } from './sample.js';
import { trainCommand } from './train.js';

/** The version in the package's package.json (two levels above both src/cli and dist/cli). */
function packageVersion(): string {
  const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version?: unknown };
  if (typeof pkg.version !== 'string') throw new Error('package.json has no version');
  return pkg.version;
}

export function buildCli(): Command {
  const program = new Command('mdlm')
    .description('Train masked-diffusion and autoregressive language models on WebGPU, CUDA or the CPU')
    .version(packageVersion(), '-V, --version', 'print the version and exit')
    .showHelpAfterError()
    .exitOverride();
  program.addCommand(trainCommand());
  program.addCommand(sampleCommand());
  program.addCommand(chatCommand());
  program.addCommand(rlCommand());
  program.addCommand(evalCommand());
  program.addCommand(dataCommand());
  program.addCommand(modelCommand());
  program.addCommand(probeCommand());
  program.addCommand(benchCommand());
  return program;
}

export async function main(argv: readonly string[]): Promise<number> {
  try {
    await buildCli().parseAsync(argv as string[], { from: 'user' });
    return process.exitCode === undefined ? 0 : Number(process.exitCode);
  } catch (e) {
    // A filesystem error no command caught itself (data prepare --out, a disk filling up): one line too.
    const err = isSystemError(e) && e.syscall !== undefined ? fileError(e, { path: e.path ?? 'a file', action: syscallAction(e.syscall) }) : e;
    if (err instanceof MdlmError) {
      console.error(`mdlm: ${err.code}: ${err.message}`);
      return 1;
    }
    const code = (e as { code?: string }).code;
    if (typeof code === 'string' && code.startsWith('commander.')) {
      return code === 'commander.helpDisplayed' || code === 'commander.version' || code === 'commander.help' ? 0 : 1;
    }
    throw e;
  }
}

