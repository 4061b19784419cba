/** `mdlm probe`: every backend, whether it works here and why not, and what the device offers. */
import { Command } from 'commander';
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

export function probeCommand(): Command {
  return new Command('probe')
    .description('Describe every backend: availability (and why not), device, features and limits')
    .option('--json', 'print JSON')
    .action(async (opts: { json?: boolean }) => {
      const probes = await probeAll();
      console.log(opts.json ? JSON.stringify(probes, null, 2) : formatProbe(probes));
    });
}
