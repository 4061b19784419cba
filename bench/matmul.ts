/**
 * npx tsx bench/matmul.ts [--sizes 1024,2048,4096] [--reps N] [--json] [--mdlm-only]
 * Without --sizes: the matmul op's bench cases (squares and linear-layer shapes).
 */
import { benchMatmul, formatMatmulTable, matmulBenchShapes } from '../src/bench/matmul.js';

function flag(name: string): string | undefined {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

const sizes = flag('--sizes')?.split(',').map(Number);
const json = process.argv.includes('--json');
const records = await benchMatmul({
  shapes: matmulBenchShapes(sizes),
  reps: Number(flag('--reps') ?? 10),
  mdlmOnly: process.argv.includes('--mdlm-only'),
  onRecord: (r) => {
    if (!json) console.error(`${r.shape}: mdlm ${r.mdlmTflops.toFixed(3)} TFLOP/s${r.tfjsTflops === undefined ? '' : `, tfjs ${r.tfjsTflops.toFixed(3)}`}`);
  },
});
if (records[0]) console.log(json ? JSON.stringify(records, null, 2) : `${records[0].adapter}\n${formatMatmulTable(records)}`);
