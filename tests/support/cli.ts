/** Run the CLI as a user does: bin/mdlm.js over the compiled dist/ (npm test builds it first). */
import { spawnSync } from 'node:child_process';

export interface CliResult {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

export function mdlm(...args: string[]): CliResult {
  return mdlmWithEnv({}, ...args);
}

/** mdlm(...args) with more environment variables. */
export function mdlmWithEnv(env: Readonly<Record<string, string>>, ...args: string[]): CliResult {
  const r = spawnSync(process.execPath, ['bin/mdlm.js', ...args], { encoding: 'utf8', timeout: 120_000, env: { ...process.env, ...env } });
  return { code: r.status ?? -1, stdout: r.stdout, stderr: r.stderr };
}
