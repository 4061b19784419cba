/** Every WebGPU kernel, one file per op, named like the op and its shader. */
import type { WebGpuKernelEntry } from '../kernel.js';
import { addKernel } from './add.js';
import { diffusionMaskKernel } from './diffusion_mask.js';
import { embeddingBackwardKernel, embeddingKernel } from './embedding.js';
import { philoxKernel } from './philox.js';

export const WEBGPU_KERNELS: readonly WebGpuKernelEntry[] = [addKernel, embeddingKernel, embeddingBackwardKernel, philoxKernel, diffusionMaskKernel];
