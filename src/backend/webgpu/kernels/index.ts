/** Every WebGPU kernel, one file per op, named like the op and its shader. */
import type { WebGpuKernelEntry } from '../kernel.js';
import { castKernel } from './cast.js';
import { reduceKernel } from './reduce.js';
import { matmulAddKernel, matmulKernel } from './matmul.js';
import { embeddingKernel, embeddingBackwardKernel } from './embedding.js';
import { rmsnormKernel, rmsnormBackwardKernel } from './rmsnorm.js';
import { ropeKernel } from './rope.js';
import { attentionKernel, attentionBackwardKernel } from './attention.js';
import { attentionDecodeKernel } from './attention_decode.js';
import { swigluKernel, swigluBackwardKernel } from './swiglu.js';
import { matmulSwigluKernel, matmulSwigluBackwardKernel } from './matmul_swiglu.js';
import { matmulRopeKernel } from './matmul_rope.js';
import { crossEntropyKernel, crossEntropyBackwardKernel, crossEntropyFusedKernel } from './cross_entropy.js';
import { diffusionMaskKernel } from './diffusion_mask.js';
import { compactRowsKernel } from './compact_rows.js';
import { gradNormKernel } from './grad_norm.js';
import { adamwCastKernel, adamwKernel } from './adamw.js';

export const WEBGPU_KERNELS: readonly WebGpuKernelEntry[] = [
  castKernel,
  reduceKernel,
  matmulKernel,
  matmulAddKernel,
  embeddingKernel,
  embeddingBackwardKernel,
  rmsnormKernel,
  rmsnormBackwardKernel,
  ropeKernel,
  attentionKernel,
  attentionBackwardKernel,
  attentionDecodeKernel,
  swigluKernel,
  swigluBackwardKernel,
  matmulSwigluKernel,
  matmulSwigluBackwardKernel,
  matmulRopeKernel,
  crossEntropyKernel,
  crossEntropyBackwardKernel,
  crossEntropyFusedKernel,
  diffusionMaskKernel,
  compactRowsKernel,
  gradNormKernel,
  adamwKernel,
  adamwCastKernel,
];
