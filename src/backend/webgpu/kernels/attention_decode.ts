import { attentionDecode } from '../../../ops/attention_decode.js';
import { defineKernel } from '../kernel.js';

/** One workgroup per (query head, sequence). */
export const attentionDecodeKernel = defineKernel({
  op: attentionDecode,
  shaders: ['attention_decode'],
  run(k, { q, k: keys, v, out }, { batch, heads, kvHeads, headDim, maxLen, length, scale, kvStride }) {
    k.dispatch({
      shader: 'attention_decode',
      entry: 'main',
      bindings: { params: { batch, heads, kv_heads: kvHeads, head_dim: headDim, max_len: maxLen, length, kv_stride: kvStride, scale }, q: q!, k: keys!, v: v!, out: out! },
      workgroups: [heads, batch],
    });
  },
});
