/** Every WebGPU kernel, one file per op, named like the op and its shader. */
import type { WebGpuKernelEntry } from '../kernel.js';
import { addKernel } from './add.js';
import { adamwKernel } from './adamw.js';
import { castKernel } from './cast.js';
import { gradNormKernel } from './grad_norm.js';
import { reduceKernel } from './reduce.js';
import { scaleKernel } from './scale.js';

export const WEBGPU_KERNELS: readonly WebGpuKernelEntry[] = [addKernel, scaleKernel, castKernel, reduceKernel, gradNormKernel, adamwKernel];
