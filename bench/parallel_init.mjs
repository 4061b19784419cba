// Parameter init of a preset on one thread and over worker threads (src/runtime/parallel_init.ts),
// side by side in one process, and whether the two agree bit for bit. Needs dist/ (npm run build).
// Usage: node bench/parallel_init.mjs [preset] [threads]   (default llama-124m, all cores)
import { availableParallelism } from 'node:os';
const { resolveConfig } = await import('../dist/config/load.js');
const { PARAM_ALIGN, paramSizes } = await import('../dist/config/model-size.js');
const { fillSequential } = await import('../dist/nn/params.js');
const { parallelFiller } = await import('../dist/runtime/parallel_init.js');

const preset = process.argv[2] ?? 'llama-124m';
const threads = Number(process.argv[3] ?? availableParallelism());
const cfg = resolveConfig({ preset });
let offset = 0;
const jobs = paramSizes(cfg.model).map((n, index) => {
  const job = { offset, n, init: { kind: 'normal', std: cfg.model.initStd }, index };
  offset += Math.ceil(n / PARAM_ALIGN) * PARAM_ALIGN;
  return job;
});
const time = (fill) => {
  const t0 = performance.now();
  const out = fill(offset, jobs, cfg.train.seed);
  return [out, (performance.now() - t0) / 1000];
};
const [one, oneS] = time(fillSequential);
const [many, manyS] = time(parallelFiller({ threads }));
const same = Buffer.from(one.buffer).equals(Buffer.from(many.buffer));
console.log(`${preset}: ${(offset / 1e6).toFixed(1)}M values; one thread ${oneS.toFixed(2)} s, ${threads} threads ${manyS.toFixed(2)} s (${(oneS / manyS).toFixed(2)}x); identical: ${same}`);
