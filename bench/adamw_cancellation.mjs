// Why the adamw parity case uses n = 18, not 2: the norm-wise relative error of the f32 moment
// update m = β1·m + (1 − β1)·g (g = grad·clip, as src/ops/adamw.ts samples them) against float64,
// over many random draws. Few elements mean no averaging, so cancellation sets the tail.
// Usage: node bench/adamw_cancellation.mjs [draws]   (default 200000)
const f = Math.fround;
const draws = Number(process.argv[2] ?? 200000);
function normal() {
  return Math.sqrt(-2 * Math.log(1 - Math.random())) * Math.cos(2 * Math.PI * Math.random());
}
for (const n of [2, 6, 18]) {
  const errs = [];
  for (let t = 0; t < draws; t++) {
    const clip = 0.25 + 0.75 * Math.random();
    let num = 0;
    let den = 0;
    for (let i = 0; i < n; i++) {
      const m0 = f(0.01 * normal());
      const grad = f(0.1 * normal());
      const g = f(grad * f(clip));
      const got = f(f(f(0.9) * m0) + f(f(1 - 0.9) * g));
      const want = 0.9 * m0 + 0.1 * grad * clip;
      num += (got - want) ** 2;
      den += want * want;
    }
    errs.push(Math.sqrt(num / den));
  }
  errs.sort((a, b) => a - b);
  const over = errs.filter((e) => e > 1e-6).length / draws;
  console.log(`n=${n}: median ${errs[draws >> 1].toExponential(2)}, max ${errs.at(-1).toExponential(2)}, above the 1e-6 tolerance ${(100 * over).toFixed(3)}% of ${draws} draws`);
}
