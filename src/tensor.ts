import { fail } from './errors.js';

/** Storage dtypes. Every backend knows all of them; each supports a subset (Backend.dtypes). */
export const DTYPES = ['f32', 'f16', 'bf16', 'fp8e4m3', 'fp8e5m2', 'i32', 'u32'] as const;
export type DType = (typeof DTYPES)[number];
export type FloatDType = Exclude<DType, 'i32' | 'u32'>;

export const DTYPE_BYTES: Record<DType, number> = {
  f32: 4, f16: 2, bf16: 2, fp8e4m3: 1, fp8e5m2: 1, i32: 4, u32: 4,
};

export function isFloat(d: DType): d is FloatDType {
  return d !== 'i32' && d !== 'u32';
}

export function parseDType(s: string): DType {
  if ((DTYPES as readonly string[]).includes(s)) return s as DType;
  return fail('BAD_DTYPE', `unknown dtype '${s}'; expected one of ${DTYPES.join(', ')}`);
}

export type Shape = readonly number[];

export function numel(shape: Shape): number {
  let n = 1;
  for (const d of shape) n *= d;
  return n;
}

export function shapeStr(shape: Shape): string {
  return `[${shape.join(', ')}]`;
}

export function sameShape(a: Shape, b: Shape): boolean {
  return a.length === b.length && a.every((d, i) => d === b[i]);
}

export function checkShape(shape: Shape, what: string): void {
  for (const d of shape) {
    if (!Number.isInteger(d) || d < 0) fail('BAD_SHAPE', `${what}: shape ${shapeStr(shape)} must hold non-negative integers`);
  }
}

/**
 * Host-side data: float tensors travel as Float32Array whatever their storage dtype (backends
 * convert on upload/download), integer tensors as Int32Array/Uint32Array.
 */
export type HostArray = Float32Array | Int32Array | Uint32Array;

export function hostArrayFor(dtype: DType, n: number): HostArray {
  if (dtype === 'i32') return new Int32Array(n);
  if (dtype === 'u32') return new Uint32Array(n);
  return new Float32Array(n);
}

let nextTensorId = 1;

/**
 * A tensor: shape and dtype over backend storage. `handle` is the backend's own storage object
 * (a typed array on the CPU, a GPUBuffer on WebGPU); `offset` is in elements, for views into
 * flat parameter/gradient buffers.
 */
export class Tensor {
  readonly id = nextTensorId++;
  constructor(
    readonly backend: string,
    readonly shape: Shape,
    readonly dtype: DType,
    readonly handle: object,
    readonly offset = 0,
  ) {}
  get size(): number {
    return numel(this.shape);
  }
  get byteSize(): number {
    return this.size * DTYPE_BYTES[this.dtype];
  }
  toString(): string {
    return `Tensor(${this.backend}, ${this.dtype}, ${shapeStr(this.shape)})`;
  }
}
