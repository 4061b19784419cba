/**
 * attention_decode: one new query per sequence against a key/value cache, for incremental
 * (KV-cached) autoregressive decoding. out[b, h] = softmax_j(scale · q[b, h] · k[b, j, g]) · v[b, j, g]
 * over the cached positions j < length, g = floor(h / (heads / kvHeads)). The caches hold maxLen
 * positions of kvStride elements, [B, maxLen, kvStride], the kvHeads · D values of a position
 * first (a stride above that lets each position start on a 256-byte boundary, where WebGPU can
 * bind it for writing). The new token's key and value are already written at length − 1, so
 * causality is the length: nothing past it is read.
 */
import { MAX_HEAD_DIM } from './attention.js';
import { F16_ROUNDED_OUTPUT, badAttr, defineOp, randn, requireDims } from './op.js';

export interface AttentionDecodeAttrs {
  readonly batch: number;
  readonly heads: number;
  readonly kvHeads: number;
  readonly headDim: number;
  /** Positions the caches hold. */
  readonly maxLen: number;
  /** Positions attended: 1..maxLen. */
  readonly length: number;
  /** Elements from one cached position to the next (at least kvHeads · headDim). */
  readonly kvStride: number;
  readonly scale: number;
}

/** Keys a WebGPU workgroup keeps scores for (workgroup memory: 4096 floats, 16 KiB). */
export const MAX_DECODE_KEYS = 4096;

function shapes({ batch: B, heads: H, headDim: D, maxLen: T, kvStride: S }: AttentionDecodeAttrs) {
  return { q: [B, H, D], k: [B, T, S], v: [B, T, S], out: [B, H, D] };
}

export const attentionDecode = defineOp<AttentionDecodeAttrs>({
  name: 'attention_decode',
  summary: 'out = softmax(scale·q·Kᵀ)·V for one query per sequence over the first `length` cached keys (grouped-query heads)',
  args: [
    { name: 'q', role: 'in', dtype: 'float' },
    { name: 'k', role: 'in', dtype: 'float' },
    { name: 'v', role: 'in', dtype: 'float' },
    { name: 'out', role: 'out', dtype: 'float' },
  ],
  floatDtypes: ['f32', 'bf16', 'f16'],
  validate(attrs) {
    requireDims('attention_decode', attrs, ['batch', 'heads', 'kvHeads', 'headDim', 'maxLen', 'length', 'kvStride']);
    const { heads, kvHeads, headDim, maxLen, length, scale, kvStride } = attrs;
    if (kvStride < kvHeads * headDim) badAttr('attention_decode', 'kvStride', kvStride, `expected at least kvHeads · headDim (${kvHeads * headDim})`);
    if (heads % kvHeads !== 0) badAttr('attention_decode', 'kvHeads', kvHeads, `heads (${heads}) must be a multiple of kvHeads`);
    if (headDim > MAX_HEAD_DIM || headDim % 4 !== 0) badAttr('attention_decode', 'headDim', headDim, `expected a multiple of 4 up to ${MAX_HEAD_DIM}`);
    if (length > maxLen) badAttr('attention_decode', 'length', length, `expected at most maxLen (${maxLen})`);
    if (maxLen > MAX_DECODE_KEYS) badAttr('attention_decode', 'maxLen', maxLen, `expected at most ${MAX_DECODE_KEYS} cached positions`);
    if (typeof scale !== 'number' || !Number.isFinite(scale) || scale <= 0) badAttr('attention_decode', 'scale', scale, 'expected a finite positive number');
  },
  shapes,
  reference({ q, k, v, out }, { batch, heads, kvHeads, headDim: D, maxLen, length, scale, kvStride }) {
    const group = heads / kvHeads;
    const p = new Float64Array(length);
    for (let b = 0; b < batch; b++) {
      for (let h = 0; h < heads; h++) {
        const g = Math.floor(h / group);
        const qo = (b * heads + h) * D;
        const kv = (j: number) => (b * maxLen + j) * kvStride + g * D;
        let max = -Infinity;
        for (let j = 0; j < length; j++) {
          let s = 0;
          for (let d = 0; d < D; d++) s += q![qo + d]! * k![kv(j) + d]!;
          p[j] = s * scale;
          max = Math.max(max, p[j]!);
        }
        let sum = 0;
        for (let j = 0; j < length; j++) sum += p[j] = Math.exp(p[j]! - max);
        for (let d = 0; d < D; d++) {
          let acc = 0;
          for (let j = 0; j < length; j++) acc += p[j]! * v![kv(j) + d]!;
          out![qo + d] = acc / sum;
        }
      }
    }
  },
  cases: (scale) => {
    const c = (label: string, batch: number, heads: number, kvHeads: number, headDim: number, maxLen: number, length: number, pad = 0) => ({
      label, attrs: { batch, heads, kvHeads, headDim, maxLen, length, scale: 1 / Math.sqrt(headDim), kvStride: kvHeads * headDim + pad },
    });
    return scale === 'test'
      ? [
          c('gqa 4/2 D16, 37 of 40 cached, padded positions', 1, 4, 2, 16, 40, 37, 32),
          c('B2 D8, the first position only', 2, 3, 3, 8, 5, 1),
          c('B2 gqa 4/1 D64, 300 cached (several key rounds)', 2, 4, 1, 64, 300, 300),
        ]
      : [c('B1 H16 D128, 2048 cached', 1, 16, 16, 128, 2048, 2048), c('B8 H12 D64, 1024 cached', 8, 12, 12, 64, 1024, 1024)];
  },
  sample: (rng, attrs) => {
    const s = shapes(attrs);
    const n = (shape: readonly number[]) => shape.reduce((x, y) => x * y, 1);
    return { q: randn(rng, n(s.q)), k: randn(rng, n(s.k)), v: randn(rng, n(s.v)) };
  },
  // f32: a dot product of D terms per key and sums over `length` keys, as attention's forward.
  // bf16: the output rounded once to bf16 (≤ 3.9e-3), the inputs already bf16.
  tolerance: { f32: 2e-5, bf16: 5e-3, f16: F16_ROUNDED_OUTPUT },
  flops: ({ batch, heads, headDim, length }) => 4 * batch * heads * headDim * length,
});
