/** The registry: the single list of ops. Backends, the parity harness and `mdlm bench kernels` walk it. */
import type { OpDef } from './op.js';
import { add } from './add.js';
import { adamw } from './adamw.js';
import { cast } from './cast.js';
import { gradNorm } from './grad_norm.js';
import { reduce } from './reduce.js';
import { scale } from './scale.js';

export const OPS: readonly OpDef<unknown>[] = [
  add as OpDef<unknown>,
  scale as OpDef<unknown>,
  cast as OpDef<unknown>,
  reduce as OpDef<unknown>,
  gradNorm as OpDef<unknown>,
  adamw as OpDef<unknown>,
];

export function findOp(name: string): OpDef<unknown> | undefined {
  return OPS.find((o) => o.name === name);
}
