/** Every WebGPU kernel, one file per op, named like the op and its shader. */
import type { WebGpuKernelEntry } from '../kernel.js';
import { addKernel } from './add.js';
import { axpyKernel } from './axpy.js';
import { scaleKernel } from './scale.js';
import { castKernel } from './cast.js';
import { reduceKernel } from './reduce.js';
import { matmulAddKernel, matmulKernel } from './matmul.js';
import { embeddingKernel, embeddingBackwardKernel } from './embedding.js';
import { rmsnormKernel, rmsnormBackwardKernel } from './rmsnorm.js';
import { layernormKernel, layernormBackwardKernel } from './layernorm.js';
import { ropeKernel, ropeBackwardKernel } from './rope.js';
import { attentionKernel, attentionBackwardKernel } from './attention.js';
import { attentionDecodeKernel } from './attention_decode.js';
import { swigluKernel, swigluBackwardKernel } from './swiglu.js';
import { matmulSwigluKernel, matmulSwigluBackwardKernel } from './matmul_swiglu.js';
import { matmulRopeKernel } from './matmul_rope.js';
import { geluKernel, geluBackwardKernel } from './gelu.js';
import { crossEntropyKernel, crossEntropyBackwardKernel, crossEntropyFusedKernel } from './cross_entropy.js';
import { philoxKernel } from './philox.js';
import { diffusionMaskKernel } from './diffusion_mask.js';
import { compactRowsKernel } from './compact_rows.js';
import { gradNormKernel } from './grad_norm.js';
import { adamwCastKernel, adamwKernel } from './adamw.js';

export const WEBGPU_KERNELS: readonly WebGpuKernelEntry[] = [
  addKernel,
  axpyKernel,
  scaleKernel,
  castKernel,
  reduceKernel,
  matmulKernel,
  matmulAddKernel,
  embeddingKernel,
  embeddingBackwardKernel,
  rmsnormKernel,
  rmsnormBackwardKernel,
  layernormKernel,
  layernormBackwardKernel,
  ropeKernel,
  ropeBackwardKernel,
  attentionKernel,
  attentionBackwardKernel,
  attentionDecodeKernel,
  swigluKernel,
  swigluBackwardKernel,
  matmulSwigluKernel,
  matmulSwigluBackwardKernel,
  matmulRopeKernel,
  geluKernel,
  geluBackwardKernel,
  crossEntropyKernel,
  crossEntropyBackwardKernel,
  crossEntropyFusedKernel,
  philoxKernel,
  diffusionMaskKernel,
  compactRowsKernel,
  gradNormKernel,
  adamwKernel,
  adamwCastKernel,
];
