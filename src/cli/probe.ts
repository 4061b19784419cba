/**
 * `mdlm probe`: every backend, whether it works here and why not, and what the device offers; then
 * the job the environment puts this process in.
 */
import { Command } from 'commander';
import { type Environment, distEnv } from '../dist/env.js';
import { MdlmError } from '../errors.js';
import { type BackendProbe, probeAll } from '../runtime/backends.js';

export function formatProbe(probes: readonly BackendProbe[]): string {
  const lines: string[] = [];
  for (const p of probes) {
    lines.push(`${p.name.padEnd(7)} ${p.available ? 'available' : 'unavailable'}${p.reason ? `: ${p.reason}` : ''}`);
    if (!p.detail) continue;
    const d = p.detail as Record<string, unknown>;
    for (const [k, v] of Object.entries(d)) {
      if ((k === 'limits' || k === 'keyFeatures') && v && typeof v === 'object') {
        lines.push(`        ${k === 'limits' ? 'limits' : 'key features'}:`);
        for (const [lk, lv] of Object.entries(v)) lines.push(`          ${lk}: ${lv}`);
      } else if (Array.isArray(v)) {
        lines.push(`        ${k}: ${v.length ? v.join(', ') : '(none)'}`);
      } else if (v !== '' && v !== undefined) {
        lines.push(`        ${k}: ${String(v)}`);
      }
    }
  }
  return lines.join('\n');
}

/** The job `env` puts this process in (src/dist/env.ts), or what is wrong with its variables. */
export function formatWorld(env: Environment): string {
  try {
    const d = distEnv(env);
    if (d.launcher === 'single') return 'world   one process (no RANK and WORLD_SIZE, no SLURM task)';
    return `world   rank ${d.rank} of ${d.worldSize} (${d.launcher}; local rank ${d.localRank} of ${d.localWorldSize}), rank 0's store at ${d.masterAddr}:${d.masterPort}`;
  } catch (e) {
    if (e instanceof MdlmError) return `world   ${e.message}`;
    throw e;
  }
}

export function probeCommand(): Command {
  return new Command('probe')
    .description('Describe every backend: availability (and why not), device, features and limits; and the rank and world size the environment gives')
    .option('--json', 'print JSON')
    .action(async (opts: { json?: boolean }) => {
      const probes = await probeAll();
      console.log(opts.json ? JSON.stringify(probes, null, 2) : `${formatProbe(probes)}\n${formatWorld(process.env)}`);
    });
}
