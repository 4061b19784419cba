/**
 * matmul_swiglu: the SwiGLU MLP's gate/up projection and its product in one op, in the MLP's
 * transposed layout (src/nn/mlp.ts): [Gᵀ; Uᵀ] = Wgu · xᵀ into gu ([2·hidden, rows]: the gate rows,
 * then the up rows) and out = silu(G) · U ([hidden, rows]). A backend may fuse the two (CUDA on
 * Hopper: cuda/gemm/gemm_ws.cuh's SwiGLU epilogue computes out from G and U as it stores them, and
 * the swiglu kernel's second read of gu is saved); the result is that of matmul then swiglu.
 *
 * matmul_swiglu_backward: the down projection's input gradient and SwiGLU's backward in one op:
 * dhᵀ = Wdownᵀ · doutᵀ ([hidden, rows]), then dG and dU from it and gu into dgu. Fused on Hopper
 * (the epilogue computes dG and dU from dh as it leaves the accumulators: dh is never stored).
 */
import { productNT, transposed } from './matmul.js';
import { BF16_ROUNDED_OUTPUT, F16_ROUNDED_OUTPUT, type OpCase, defineOp, randn, requireDims } from './op.js';

export interface MatmulSwigluAttrs {
  /** F: hidden units (rows of G, U and out). */
  readonly hidden: number;
  /** Tokens (columns of G, U and out). */
  readonly rows: number;
  /** The contraction: dModel. */
  readonly k: number;
}

function sigmoid(x: number): number {
  return 1 / (1 + Math.exp(-x));
}

// Both ops' cases. Hopper's fused paths want rows and k (and, backward, hidden) multiples of 8:
// the first three, with tails of the 64- and 128-row tiles in hidden and of the 128-token tiles
// in rows; the last takes the unfused path everywhere.
function cases(scale: 'test' | 'bench'): readonly OpCase<MatmulSwigluAttrs>[] {
  return scale === 'test'
    ? [
        { label: 'F=64 rows=128 k=64 (one tile)', attrs: { hidden: 64, rows: 128, k: 64 } },
        { label: 'F=104 rows=200 k=72 (tails)', attrs: { hidden: 104, rows: 200, k: 72 } },
        { label: 'F=392 rows=520 k=64 (tiles each way)', attrs: { hidden: 392, rows: 520, k: 64 } },
        { label: 'F=37 rows=45 k=33 (odd: unfused)', attrs: { hidden: 37, rows: 45, k: 33 } },
      ]
    : [
        { label: 'llama-124m F=2048 rows=16384 k=768', attrs: { hidden: 2048, rows: 16384, k: 768 } },
        { label: 'llama-1.3b F=5504 rows=16384 k=2048', attrs: { hidden: 5504, rows: 16384, k: 2048 } },
      ];
}

export const matmulSwiglu = defineOp<MatmulSwigluAttrs>({
  name: 'matmul_swiglu',
  summary: '[G; U] = wgu · xᵀ (gu, [2·hidden, rows]), out = silu(G) * U ([hidden, rows]): the gate/up projection and SwiGLU in one',
  args: [
    { name: 'wgu', role: 'in', dtype: 'float' },
    { name: 'x', role: 'in', dtype: 'float' },
    { name: 'gu', role: 'out', dtype: 'float' },
    { name: 'out', role: 'out', dtype: 'float' },
  ],
  floatDtypes: ['f32', 'bf16', 'f16'],
  validate: (attrs) => requireDims('matmul_swiglu', attrs, ['hidden', 'rows', 'k']),
  shapes: ({ hidden, rows, k }) => ({ wgu: [2 * hidden, k], x: [rows, k], gu: [2 * hidden, rows], out: [hidden, rows] }),
  reference({ wgu, x, gu, out }, { hidden, rows, k }) {
    gu!.set(productNT(wgu!, 0, x!, 0, 2 * hidden, rows, k));
    // From G and U as f32 storage holds them: matmul then swiglu exactly, in f32 (where a backward
    // that recomputes out with the swiglu op gets the same bits).
    for (let i = 0; i < hidden * rows; i++) {
      const g = Math.fround(gu![i]!);
      out![i] = g * sigmoid(g) * Math.fround(gu![hidden * rows + i]!);
    }
  },
  cases,
  sample: (rng, { hidden, rows, k }) => ({ wgu: randn(rng, 2 * hidden * k, 1 / Math.sqrt(k)), x: randn(rng, rows * k) }),
  // matmul's (a k-term f32 sum, one bf16 rounding); out from G and U as stored adds their
  // roundings under bf16, within the same bound at these sizes.
  tolerance: { f32: 2e-5, bf16: BF16_ROUNDED_OUTPUT, f16: F16_ROUNDED_OUTPUT },
  flops: ({ hidden, rows, k }) => 2 * 2 * hidden * rows * k,
});

export const matmulSwigluBackward = defineOp<MatmulSwigluAttrs>({
  name: 'matmul_swiglu_backward',
  summary: 'dh = wdownᵀ · doutᵀ ([hidden, rows]), then [dG; dU] = swiglu_backward(dh, G, U) into dgu ([2·hidden, rows])',
  args: [
    { name: 'wdown', role: 'in', dtype: 'float' },
    { name: 'dout', role: 'in', dtype: 'float' },
    { name: 'gu', role: 'in', dtype: 'float' },
    { name: 'dgu', role: 'out', dtype: 'float' },
  ],
  floatDtypes: ['f32', 'bf16', 'f16'],
  validate: (attrs) => requireDims('matmul_swiglu_backward', attrs, ['hidden', 'rows', 'k']),
  shapes: ({ hidden, rows, k }) => ({ wdown: [k, hidden], dout: [rows, k], gu: [2 * hidden, rows], dgu: [2 * hidden, rows] }),
  reference({ wdown, dout, gu, dgu }, { hidden, rows, k }) {
    const n = hidden * rows;
    const dhs = productNT(transposed(wdown!, 0, k, hidden), 0, dout!, 0, hidden, rows, k);
    for (let i = 0; i < n; i++) {
      // dh as f32 storage holds it: matmul then swiglu_backward exactly, in f32
      const dh = Math.fround(dhs[i]!), g = gu![i]!, u = gu![n + i]!, sg = sigmoid(g);
      dgu![i] = dh * u * (sg + g * sg * (1 - sg));
      dgu![n + i] = dh * g * sg;
    }
  },
  cases,
  sample: (rng, { hidden, rows, k }) => ({ wdown: randn(rng, k * hidden, 1 / Math.sqrt(k)), dout: randn(rng, rows * k), gu: randn(rng, 2 * hidden * rows, 2) }),
  tolerance: { f32: 2e-5, bf16: BF16_ROUNDED_OUTPUT, f16: F16_ROUNDED_OUTPUT },
  flops: ({ hidden, rows, k }) => 2 * hidden * rows * k,
});
