/** Every WebGPU kernel, one file per op, named like the op and its shader. */
import type { WebGpuKernelEntry } from '../kernel.js';
import { addKernel } from './add.js';
import { swigluBackwardKernel, swigluKernel } from './swiglu.js';
import { geluBackwardKernel, geluKernel } from './gelu.js';
import { crossEntropyBackwardKernel, crossEntropyKernel } from './cross_entropy.js';

export const WEBGPU_KERNELS: readonly WebGpuKernelEntry[] = [
  addKernel,
  swigluKernel,
  swigluBackwardKernel,
  geluKernel,
  geluBackwardKernel,
  crossEntropyKernel,
  crossEntropyBackwardKernel,
];
