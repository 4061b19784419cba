import { type RopeAttrs, rope, ropeStrides } from '../../../ops/rope.js';
import type { Tensor } from '../../../tensor.js';
import { type KernelContext, defineKernel, grid1d } from '../kernel.js';

/** 2·log2(base)/D as f32 hi (12 significant bits) + f32 lo; see shaders/rope.wgsl. */
export function ropeExponent(base: number, headDim: number): { exp_hi: number; exp_lo: number } {
  const c = (2 * Math.log2(base)) / headDim;
  const ulp = 2 ** (Math.floor(Math.log2(c)) - 11);
  const hi = Math.round(c / ulp) * ulp;
  return { exp_hi: hi, exp_lo: Math.fround(c - hi) };
}

/**
 * rope's shader from src (its first token `srcOffset` elements in, a multiple of 4) into dst:
 * entry `rope` turns by +θ, `rope_backward` by −θ (attention_backward's q and k gradients).
 */
export function dispatchRope(k: KernelContext, entry: 'rope' | 'rope_backward', src: Tensor, positions: Tensor, dst: Tensor, a: RopeAttrs, srcOffset = 0): void {
  const tokens = a.batch * a.seqLen;
  const halfDim = a.headDim / 2;
  const strides = ropeStrides(a);
  k.dispatch({
    shader: 'rope',
    entry,
    bindings: {
      params: { tokens, heads: a.heads, half_dim: halfDim, ...ropeExponent(a.base, a.headDim), x_stride4: strides.x / 4, y_stride4: strides.y / 4, rotate: a.rotate === false ? 0 : 1, x_offset4: srcOffset / 4 },
      src, positions, dst,
    },
    workgroups: grid1d(tokens * (halfDim / 4), 256),
  });
}

export const ropeKernel = defineKernel({
  op: rope,
  shaders: ['rope'],
  run: (k, { x, positions, y }, attrs) => dispatchRope(k, 'rope', x!, positions!, y!, attrs),
});
