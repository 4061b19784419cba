/**
 * What a WebGPU kernel sees: a way to dispatch an entry point of a shader with named bindings
 * (tensors for storage buffers, plain values for the uniform struct), scratch tensors that live
 * for one op call, and the device limits. Binding names and uniform fields are checked against
 * the shader's reflection, so a mismatch is an error naming the shader and binding.
 */
import type { OpDef } from '../../ops/op.js';
import { DTYPE_BYTES, type DType, type Shape, type Tensor } from '../../tensor.js';

export type UniformValue = number | readonly number[];
export type UniformValues = Readonly<Record<string, UniformValue>>;

export interface DispatchSpec {
  readonly shader: string;
  readonly entry: string;
  /** Storage bindings by variable name, and the uniform struct's fields by the uniform's name. */
  readonly bindings: Readonly<Record<string, Tensor | UniformValues>>;
  readonly workgroups: readonly [number, number?, number?];
  /** Pipeline-overridable constants (WGSL `override`), part of the pipeline cache key. */
  readonly constants?: Readonly<Record<string, number>>;
}

export interface KernelContext {
  dispatch(spec: DispatchSpec): void;
  /** A temporary tensor, returned to the pool when the op call ends. */
  scratch(shape: Shape, dtype: DType): Tensor;
  /** Copy all of src into dst (same dtype and size). */
  copy(src: Tensor, dst: Tensor): void;
  /** Zero a tensor (its bytes must start and end on 4-byte boundaries). */
  zero(t: Tensor): void;
  readonly limits: GPUSupportedLimits;
  readonly features: ReadonlySet<string>;
}

export interface WebGpuKernel<A> {
  readonly op: OpDef<A>;
  /** Shader files (without .wgsl) this kernel dispatches; compiled when the backend starts. */
  readonly shaders: readonly string[];
  run(k: KernelContext, args: Readonly<Record<string, Tensor>>, attrs: A): void;
}

/** Type-erased registry entry (the op's attribute type is checked where the kernel is defined). */
export interface WebGpuKernelEntry {
  readonly op: OpDef<unknown>;
  readonly shaders: readonly string[];
  run(k: KernelContext, args: Readonly<Record<string, Tensor>>, attrs: unknown): void;
}

export function defineKernel<A>(kernel: WebGpuKernel<A>): WebGpuKernelEntry {
  return kernel as unknown as WebGpuKernelEntry;
}

/**
 * Workgroup counts for `n` items of `perGroup` each, folded into y when x would pass the
 * per-dimension limit. Shaders recover the linear group as `wid.x + wid.y * nwg.x`.
 */
export function grid1d(n: number, perGroup: number, maxPerDim = 65535): [number, number, number] {
  const groups = Math.max(1, Math.ceil(n / perGroup));
  if (groups <= maxPerDim) return [groups, 1, 1];
  const y = Math.ceil(groups / maxPerDim);
  return [Math.ceil(groups / y), y, 1];
}

export function ceilDiv(a: number, b: number): number {
  return Math.ceil(a / b);
}

/**
 * `t` when its view starts where a storage binding may, else a scratch copy of it: a small
 * record read inside a table of them (an FP8 site's meta record or scale). A kernel that writes
 * the copy copies it back into `t` after its dispatches.
 */
export function bindable(k: KernelContext, t: Tensor): Tensor {
  if ((t.offset * DTYPE_BYTES[t.dtype]) % k.limits.minStorageBufferOffsetAlignment === 0) return t;
  const c = k.scratch(t.shape, t.dtype);
  k.copy(t, c);
  return c;
}
