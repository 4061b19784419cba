/** Every WebGPU kernel, one file per op, named like the op and its shader. */
import type { WebGpuKernelEntry } from '../kernel.js';
import { addKernel } from './add.js';
import { attentionBackwardKernel, attentionKernel } from './attention.js';

export const WEBGPU_KERNELS: readonly WebGpuKernelEntry[] = [addKernel, attentionKernel, attentionBackwardKernel];
