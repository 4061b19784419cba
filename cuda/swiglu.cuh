// SwiGLU's element-wise math in f32, shared by the swiglu kernels (cuda/swiglu.cu) and the GEMM
// epilogues that fuse it (cuda/gemm/gemm_ws.cuh), so both compute the same bits:
//   h = silu(g) · u, silu(g) = g · σ(g);   dg = dh · u · (σ + g · σ · (1 − σ)),  du = dh · g · σ.
#pragma once

#include "common.cuh"

namespace mdlm {

__device__ __forceinline__ float swiglu_forward(float g, float u) { return g * sigmoids(g).pos * u; }

__device__ __forceinline__ void swiglu_backward(float dh, float g, float u, float& dg, float& du) {
  const Sigmoids s = sigmoids(g);
  dg = dh * u * (s.pos + g * s.pos * s.neg);
  du = dh * g * s.pos;
}

}  // namespace mdlm
