/** The registry: the single list of ops. Backends, the parity harness and `mdlm bench kernels` walk it. */
import type { OpDef } from './op.js';
import { add } from './add.js';
import { layernorm, layernormBackward } from './layernorm.js';
import { addRmsnorm, rmsnorm, rmsnormBackward } from './rmsnorm.js';
import { rope, ropeBackward } from './rope.js';

export const OPS: readonly OpDef<unknown>[] = [
  add as OpDef<unknown>,
  rmsnorm as OpDef<unknown>,
  addRmsnorm as OpDef<unknown>,
  rmsnormBackward as OpDef<unknown>,
  layernorm as OpDef<unknown>,
  layernormBackward as OpDef<unknown>,
  rope as OpDef<unknown>,
  ropeBackward as OpDef<unknown>,
];

export function findOp(name: string): OpDef<unknown> | undefined {
  return OPS.find((o) => o.name === name);
}
