/** The registry: the single list of ops. Backends, the parity harness and `mdlm bench kernels` walk it. */
import type { OpDef } from './op.js';
import { add } from './add.js';
import { axpy } from './axpy.js';
import { scale } from './scale.js';
import { cast } from './cast.js';
import { reduce } from './reduce.js';
import { matmul, matmulAdd } from './matmul.js';
import { matmulSwiglu, matmulSwigluBackward } from './matmul_swiglu.js';
import { matmulRope } from './matmul_rope.js';
import { embedding, embeddingBackward } from './embedding.js';
import { rmsnorm, rmsnormBackward } from './rmsnorm.js';
import { layernorm, layernormBackward } from './layernorm.js';
import { rope, ropeBackward } from './rope.js';
import { attention, attentionBackward } from './attention.js';
import { attentionDecode } from './attention_decode.js';
import { swiglu, swigluBackward } from './swiglu.js';
import { gelu, geluBackward } from './gelu.js';
import { crossEntropy, crossEntropyBackward, crossEntropyFused } from './cross_entropy.js';
import { philox } from './philox.js';
import { diffusionMask } from './diffusion_mask.js';
import { compactRows } from './compact_rows.js';
import { gradNorm } from './grad_norm.js';
import { adamw, adamwCast } from './adamw.js';

export const OPS: readonly OpDef<unknown>[] = [
  add,
  axpy,
  scale,
  cast,
  reduce,
  matmul,
  matmulAdd,
  embedding,
  embeddingBackward,
  rmsnorm,
  rmsnormBackward,
  layernorm,
  layernormBackward,
  rope,
  ropeBackward,
  attention,
  attentionBackward,
  attentionDecode,
  swiglu,
  swigluBackward,
  matmulSwiglu,
  matmulSwigluBackward,
  matmulRope,
  gelu,
  geluBackward,
  crossEntropy,
  crossEntropyBackward,
  crossEntropyFused,
  philox,
  diffusionMask,
  compactRows,
  gradNorm,
  adamw,
  adamwCast,
] as OpDef<unknown>[];

export function findOp(name: string): OpDef<unknown> | undefined {
  return OPS.find((o) => o.name === name);
}
