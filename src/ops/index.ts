/** The registry: the single list of ops. Backends, the parity harness and `mdlm bench kernels` walk it. */
import type { OpDef } from './op.js';
import { add } from './add.js';
import { attention, attentionBackward } from './attention.js';

export const OPS: readonly OpDef<unknown>[] = [add as OpDef<unknown>, attention as OpDef<unknown>, attentionBackward as OpDef<unknown>];

export function findOp(name: string): OpDef<unknown> | undefined {
  return OPS.find((o) => o.name === name);
}
