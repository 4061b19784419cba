#!/usr/bin/env node
// Where a graph-replayed training step's GPU time goes, kernel by kernel: reads the CSV that
// `ncu --metrics gpu__time_duration.sum --csv --print-units base` wrote (bench/cuda-run.sh's
// ncu-train step) and prints each kernel's launches and total µs, largest first, divided by the
// number of steps profiled. ncu runs the kernels one at a time, so these are the kernels' own
// times with nothing overlapping; their sum is the step's GPU busy time.
// Usage: node bench/kernel-times.mjs <ncu.csv> <steps> [name width]
import { readFileSync } from 'node:fs';

const [file, stepsArg, widthArg] = process.argv.slice(2);
if (!file || !stepsArg) {
  console.error('usage: node bench/kernel-times.mjs <ncu.csv> <steps> [name width]');
  process.exit(2);
}
const steps = Number(stepsArg);
const width = Number(widthArg ?? 110);

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
const kernels = new Map();
let totalNs = 0;
for (const line of lines.slice(headerAt + 1)) {
  const f = parse(line);
  if (f.length <= valueCol || f[metricCol] !== 'gpu__time_duration.sum') continue;
  const ns = Number(f[valueCol].replaceAll(',', ''));
  const k = kernels.get(f[nameCol]) ?? { launches: 0, ns: 0 };
  k.launches++;
  k.ns += ns;
  kernels.set(f[nameCol], k);
  totalNs += ns;
}
const rows = [...kernels.entries()].sort((a, b) => b[1].ns - a[1].ns);
console.log(`${rows.length} kernels, ${(totalNs / 1e6 / steps).toFixed(3)} ms of GPU time a step (${steps} steps profiled)`);
console.log('ms/step'.padStart(9), 'share'.padStart(6), 'calls'.padStart(6), 'µs/call'.padStart(9), ' kernel');
for (const [name, k] of rows) {
  const msStep = k.ns / 1e6 / steps;
  if (msStep < 0.005) continue;
  console.log(msStep.toFixed(3).padStart(9), `${((100 * k.ns) / totalNs).toFixed(1)}%`.padStart(6), (k.launches / steps).toFixed(1).padStart(6),
    (k.ns / 1e3 / k.launches).toFixed(1).padStart(9), '', name.slice(0, width));
}
