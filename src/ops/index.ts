/** The registry: the single list of ops. Backends, the parity harness and `mdlm bench kernels` walk it. */
import type { OpDef } from './op.js';
import { add } from './add.js';
import { diffusionMask } from './diffusion_mask.js';
import { embedding, embeddingBackward } from './embedding.js';
import { philox } from './philox.js';

export const OPS: readonly OpDef<unknown>[] = [
  add as OpDef<unknown>,
  embedding as OpDef<unknown>,
  embeddingBackward as OpDef<unknown>,
  philox as OpDef<unknown>,
  diffusionMask as OpDef<unknown>,
];

export function findOp(name: string): OpDef<unknown> | undefined {
  return OPS.find((o) => o.name === name);
}
