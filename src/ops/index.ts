/** The registry: the single list of ops. Backends, the parity harness and `mdlm bench kernels` walk it. */
import type { OpDef } from './op.js';
import { cast } from './cast.js';
import { reduce } from './reduce.js';
import { matmul, matmulAdd } from './matmul.js';
import { matmulSwiglu, matmulSwigluBackward } from './matmul_swiglu.js';
import { matmulRope } from './matmul_rope.js';
import { embedding, embeddingBackward } from './embedding.js';
import { rmsnorm, rmsnormBackward } from './rmsnorm.js';
import { rope } from './rope.js';
import { attention, attentionBackward } from './attention.js';
import { attentionDecode } from './attention_decode.js';
import { swiglu, swigluBackward } from './swiglu.js';
import { crossEntropy, crossEntropyBackward, crossEntropyFused } from './cross_entropy.js';
import { diffusionMask } from './diffusion_mask.js';
import { compactRows } from './compact_rows.js';
import { gradNorm } from './grad_norm.js';
import { adamw, adamwCast } from './adamw.js';
import { quantizeFp8 } from './quantize_fp8.js';
import { quantizeFp8Blockwise } from './quantize_fp8_blockwise.js';
import { fp8ScaleUpdate } from './fp8_scale_update.js';
import { matmulFp8, matmulFp8Add } from './matmul_fp8.js';

export const OPS: readonly OpDef<unknown>[] = [
  cast,
  reduce,
  matmul,
  matmulAdd,
  embedding,
  embeddingBackward,
  rmsnorm,
  rmsnormBackward,
  rope,
  attention,
  attentionBackward,
  attentionDecode,
  swiglu,
  swigluBackward,
  matmulSwiglu,
  matmulSwigluBackward,
  matmulRope,
  crossEntropy,
  crossEntropyBackward,
  crossEntropyFused,
  diffusionMask,
  compactRows,
  gradNorm,
  adamw,
  adamwCast,
  quantizeFp8,
  quantizeFp8Blockwise,
  fp8ScaleUpdate,
  matmulFp8,
  matmulFp8Add,
] as OpDef<unknown>[];

export function findOp(name: string): OpDef<unknown> | undefined {
  return OPS.find((o) => o.name === name);
}
