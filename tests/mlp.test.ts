/** The SwiGLU MLP against a float64 evaluation of its formula: output, input gradient, weight gradients. */
import { describe, expect, it } from 'vitest';
import { CpuBackend } from '../src/backend/cpu/cpu.js';
import { relativeError } from '../src/harness/parity.js';
import { Arena } from '../src/nn/arena.js';
import { MlpScratch, SwiGluMlp } from '../src/nn/mlp.js';
import { ParamStore } from '../src/nn/params.js';
import { PhiloxStream, RngPurpose } from '../src/rng/philox.js';

/** y = (silu(x·Wgᵀ) ∘ x·Wuᵀ)·Wdᵀ and its gradients for dy, in float64; W* row-major [out, in]. */
function reference(x: Float64Array, wg: Float64Array, wu: Float64Array, wd: Float64Array, dy: Float64Array, rows: number, d: number, F: number) {
  const mm = (a: Float64Array, b: Float64Array, m: number, n: number, k: number, ta: boolean, tb: boolean) => {
    const out = new Float64Array(m * n);
    for (let i = 0; i < m; i++) for (let j = 0; j < n; j++) {
      let s = 0;
      for (let l = 0; l < k; l++) s += a[ta ? l * m + i : i * k + l]! * b[tb ? j * k + l : l * n + j]!;
      out[i * n + j] = s;
    }
    return out;
  };
  const g = mm(x, wg, rows, F, d, false, true), u = mm(x, wu, rows, F, d, false, true);
  const sig = g.map((v) => 1 / (1 + Math.exp(-v)));
  const h = g.map((v, i) => v * sig[i]! * u[i]!);
  const y = mm(h, wd, rows, d, F, false, true);
  const dh = mm(dy, wd, rows, F, d, false, false);
  const dg = dh.map((v, i) => v * u[i]! * sig[i]! * (1 + g[i]! * (1 - sig[i]!)));
  const du = dh.map((v, i) => v * g[i]! * sig[i]!);
  const dx = mm(dg, wg, rows, d, F, false, false).map((v, i) => v + mm(du, wu, rows, d, F, false, false)[i]!);
  return { y, dx, dwg: mm(dg, x, F, d, rows, true, false), dwu: mm(du, x, F, d, rows, true, false), dwd: mm(dy, h, d, F, rows, true, false) };
}

describe('SwiGluMlp', () => {
  // hidden · dModel = 192 keeps the gate and up weights adjacent (one GEMM for both, transposed
  // activations); 80 is padded to 128 and takes the per-weight GEMMs.
  for (const [hidden, joined] of [[24, true], [10, false]] as const) for (const recompute of [false, true]) {
    it(`matches the float64 layer: hidden ${hidden} (${joined ? 'gate and up in one GEMM' : 'separate GEMMs'})${recompute ? ', product recomputed' : ''}`, async () => {
      const b = new CpuBackend();
      const rows = 6, d = 8;
      const store = new ParamStore(b, 'f32');
      const arena = new Arena(b, 'f32');
      const mlp = new SwiGluMlp(store, arena, 'mlp', d, hidden, rows, new MlpScratch(arena, rows, d, hidden), 0.4, 0.4, recompute);
      store.materialize(5);
      expect(mlp.joined).toBe(joined);
      const rng = new PhiloxStream(3, RngPurpose.harness);
      const host = (n: number) => Float32Array.from({ length: n }, () => rng.normal());
      const [xh, dyh, rh] = [host(rows * d), host(rows * d), host(rows * d)];
      const x = arena.alloc([rows, d]), dy = arena.alloc([rows, d]), y = arena.alloc([rows, d]), dx = arena.alloc([rows, d]), residual = arena.alloc([rows, d]);
      b.upload(x, xh);
      b.upload(dy, dyh);
      b.upload(residual, rh);
      mlp.forward(b, x, residual, y);
      mlp.backward(b, x, dy, dx);
      const vals = (await b.download(store.value)) as Float32Array;
      const grads = (await b.download(store.grad)) as Float32Array;
      const w = (l: { weight: { offset: number; value: { size: number } } }, from: Float32Array) => Float64Array.from(from.subarray(l.weight.offset, l.weight.offset + l.weight.value.size));
      const want = reference(Float64Array.from(xh), w(mlp.gate, vals), w(mlp.up, vals), w(mlp.down, vals), Float64Array.from(dyh), rows, d, hidden);
      want.y = want.y.map((v, i) => v + rh[i]!); // the residual added by the down projection
      const got = { y: (await b.download(y)) as Float32Array, dx: (await b.download(dx)) as Float32Array, dwg: w(mlp.gate, grads), dwu: w(mlp.up, grads), dwd: w(mlp.down, grads) };
      for (const k of ['y', 'dx', 'dwg', 'dwu', 'dwd'] as const) expect(relativeError(got[k], want[k], false), k).toBeLessThan(1e-5);
      arena.destroy();
      store.destroy();
    });
  }
});
