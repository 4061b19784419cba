#!/usr/bin/env node
// Where a graph-replayed training step's GPU time goes, kernel by kernel: reads the CSV that
// `ncu --metrics gpu__time_duration.sum --csv --print-units base` wrote (bench/cuda-run.sh's
// ncu-train step) and prints each kernel's launches and total ms, largest first, with cuBLASLt's
// kernels (nvjet, one name per tile shape) also summed on one line. ncu runs the kernels one at
// a time, so these are the kernels' own times with nothing overlapping.
// --from: sum only the launches from the first whose name contains this text on. ncu-train
// profiles `bench train --steps 2 --warmup 0`, whose first step carries the GEMM autotune and
// has no optimizer update before it, while the second step's graph begins with the first
// step's update (deferred into it: docs/ARCHITECTURE.md), so `--from adamw_kernel` is exactly
// one step's graph, and its sum the step's GPU busy time.
// Usage: node bench/kernel-times.mjs <ncu.csv> [--from <kernel name part>] [--width <chars>]
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';

const { values, positionals } = parseArgs({ allowPositionals: true, options: { from: { type: 'string' }, width: { type: 'string', default: '110' } } });
const [file] = positionals;
if (!file || positionals.length > 1) {
  console.error('usage: node bench/kernel-times.mjs <ncu.csv> [--from <kernel name part>] [--width <chars>]');
  process.exit(2);
}
const width = Number(values.width);

// ncu's CSV: quoted fields, one row per kernel launch and metric; the log may have other lines first.
const parse = (line) => [...line.matchAll(/"((?:[^"]|"")*)"/g)].map((m) => m[1].replaceAll('""', '"'));
const lines = readFileSync(file, 'utf8').split('\n');
const headerAt = lines.findIndex((l) => l.startsWith('"ID"'));
if (headerAt < 0) {
  console.error(`${file}: no ncu CSV header ("ID",...) found`);
  process.exit(1);
}
const header = parse(lines[headerAt]);
const col = (name) => {
  const i = header.indexOf(name);
  if (i < 0) throw new Error(`${file}: no column ${name}`);
  return i;
};
const [nameCol, metricCol, valueCol] = [col('Kernel Name'), col('Metric Name'), col('Metric Value')];
const launches = [];
for (const line of lines.slice(headerAt + 1)) {
  const f = parse(line);
  if (f.length <= valueCol || f[metricCol] !== 'gpu__time_duration.sum') continue;
  launches.push({ name: f[nameCol], ns: Number(f[valueCol].replaceAll(',', '')) });
}
const first = values.from === undefined ? 0 : launches.findIndex((l) => l.name.includes(values.from));
if (first < 0) {
  console.error(`${file}: no kernel launch whose name contains "${values.from}"`);
  process.exit(1);
}
const kernels = new Map();
let totalNs = 0;
for (const { name, ns } of launches.slice(first)) {
  const k = kernels.get(name) ?? { launches: 0, ns: 0 };
  k.launches++;
  k.ns += ns;
  kernels.set(name, k);
  totalNs += ns;
}
const counted = launches.length - first;
const scope = values.from === undefined ? 'all launches' : `launches from the first "${values.from}" on`;
console.log(`${kernels.size} kernels, ${counted} ${scope}: ${(totalNs / 1e6).toFixed(3)} ms of GPU time`);
const nvjet = [...kernels.entries()].filter(([name]) => name.startsWith('nvjet'));
if (nvjet.length > 0) {
  const ns = nvjet.reduce((s, [, k]) => s + k.ns, 0);
  const n = nvjet.reduce((s, [, k]) => s + k.launches, 0);
  console.log(`cuBLASLt (nvjet) kernels: ${(ns / 1e6).toFixed(3)} ms in ${n} launches of ${nvjet.length} tile shapes (${((100 * ns) / totalNs).toFixed(1)}%)`);
}
console.log('ms'.padStart(9), 'share'.padStart(6), 'calls'.padStart(6), 'µs/call'.padStart(9), ' kernel');
for (const [name, k] of [...kernels.entries()].sort((a, b) => b[1].ns - a[1].ns)) {
  const ms = k.ns / 1e6;
  if (ms < 0.005) continue;
  console.log(ms.toFixed(3).padStart(9), `${((100 * k.ns) / totalNs).toFixed(1)}%`.padStart(6), String(k.launches).padStart(6),
    (k.ns / 1e3 / k.launches).toFixed(1).padStart(9), '', name.slice(0, width));
}
