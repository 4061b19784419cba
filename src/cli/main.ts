/** The `mdlm` command line (bin/mdlm.js runs it). User errors print `mdlm: CODE: message` without a stack and exit 1. */
import { Command } from 'commander';
import { MdlmError } from '../errors.js';
import { benchCommand } from './bench.js';
import { dataCommand } from './data.js';
import { evalCommand } from './eval.js';
import { probeCommand } from './probe.js';
import { sampleCommand } from './sample.js';
import { trainCommand } from './train.js';

export function buildCli(): Command {
  const program = new Command('mdlm')
    .description('Train masked-diffusion and autoregressive language models on WebGPU, CUDA or the CPU')
    .showHelpAfterError()
    .exitOverride();
  program.addCommand(trainCommand());
  program.addCommand(sampleCommand());
  program.addCommand(evalCommand());
  program.addCommand(dataCommand());
  program.addCommand(probeCommand());
  program.addCommand(benchCommand());
  return program;
}

export async function main(argv: readonly string[]): Promise<number> {
  try {
    await buildCli().parseAsync(argv as string[], { from: 'user' });
    return process.exitCode === undefined ? 0 : Number(process.exitCode);
  } catch (e) {
    if (e instanceof MdlmError) {
      console.error(`mdlm: ${e.code}: ${e.message}`);
      return 1;
    }
    const code = (e as { code?: string }).code;
    if (typeof code === 'string' && code.startsWith('commander.')) {
      return code === 'commander.helpDisplayed' || code === 'commander.version' || code === 'commander.help' ? 0 : 1;
    }
    throw e;
  }
}

