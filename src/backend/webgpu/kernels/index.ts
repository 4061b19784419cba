/** Every WebGPU kernel, one file per op, named like the op and its shader. */
import type { WebGpuKernelEntry } from '../kernel.js';
import { addKernel } from './add.js';
import { layernormBackwardKernel, layernormKernel } from './layernorm.js';
import { addRmsnormKernel, rmsnormBackwardKernel, rmsnormKernel } from './rmsnorm.js';
import { ropeBackwardKernel, ropeKernel } from './rope.js';

export const WEBGPU_KERNELS: readonly WebGpuKernelEntry[] = [addKernel, rmsnormKernel, addRmsnormKernel, rmsnormBackwardKernel, layernormKernel, layernormBackwardKernel, ropeKernel, ropeBackwardKernel];
