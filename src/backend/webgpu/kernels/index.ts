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
import { quantizeFp8Kernel } from './quantize_fp8.js';
import { quantizeFp8BlockwiseKernel } from './quantize_fp8_blockwise.js';
import { fp8ScaleUpdateKernel } from './fp8_scale_update.js';
import { matmulFp8AddKernel, matmulFp8Kernel } from './matmul_fp8.js';

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
  quantizeFp8Kernel,
  quantizeFp8BlockwiseKernel,
  fp8ScaleUpdateKernel,
  matmulFp8Kernel,
  matmulFp8AddKernel,
];
