/** The registry: the single list of ops. Backends, the parity harness and `mdlm bench kernels` walk it. */
import type { OpDef } from './op.js';
import { add } from './add.js';
import { swiglu, swigluBackward } from './swiglu.js';
import { gelu, geluBackward } from './gelu.js';
import { crossEntropy, crossEntropyBackward } from './cross_entropy.js';

export const OPS: readonly OpDef<unknown>[] = [
  add as OpDef<unknown>,
  swiglu as OpDef<unknown>,
  swigluBackward as OpDef<unknown>,
  gelu as OpDef<unknown>,
  geluBackward as OpDef<unknown>,
  crossEntropy as OpDef<unknown>,
  crossEntropyBackward as OpDef<unknown>,
];

export function findOp(name: string): OpDef<unknown> | undefined {
  return OPS.find((o) => o.name === name);
}
