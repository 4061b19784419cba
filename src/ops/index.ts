/** The registry: the single list of ops. Backends, the parity harness and `mdlm bench kernels` walk it. */
import type { OpDef } from './op.js';
import { add } from './add.js';
import { axpy } from './axpy.js';

export const OPS: readonly OpDef<unknown>[] = [add, axpy] as OpDef<unknown>[];

export function findOp(name: string): OpDef<unknown> | undefined {
  return OPS.find((o) => o.name === name);
}
