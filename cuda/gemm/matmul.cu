// matmul: out[b] (+)= op(a[b]) · op(b[b]) through cuBLASLt, row-major as src/ops/matmul.ts
// defines it. f32 computes with CUBLAS_COMPUTE_32F (true f32 FMAs, never TF32: the op's f32
// tolerance would not hold); bf16 inputs with f32 accumulation and f32 scale, out in bf16 or (outF32)
// f32. accumulate is GEMM's beta = 1 with C = D = out: weight gradients land in the f32 master
// gradient directly. matmul_add is beta = 1 with C = residual, D = out: a decoder block's output
// projection writes the residual stream's next value, the add read in the GEMM's epilogue.
//
// cuBLASLt is column-major. A row-major [r, c] matrix is the column-major [c, r] matrix with
// ld = c, its transpose; so out = op(A)·op(B) is computed as outᵀ = op(B)ᵀ·op(A)ᵀ: cuBLASLt's
// "A" is our b, its "B" our a, and the column-major result [n, m] is our row-major [m, n].
//
// Descriptors and the algorithm (cuda/gemm/cublaslt.cuh: the heuristic's candidates, timed on the
// shape's first call) are made once per (dtype, shape, transposes, pointer alignment, autotune
// setting) and cached; the workspace is the addon's. Should cuBLASLt offer no algorithm for a
// shape (odd leading dimensions with 2-byte alignment, say), a plain kernel computes it: one
// thread per output, f32 sums in k order.
#include <cublasLt.h>

#include <map>
#include <tuple>

#include "cublaslt.cuh"

namespace mdlm {
namespace {

struct PlanKey {
  DType dtype, out_dtype;
  int64_t batch, m, n, k;
  bool trans_a, trans_b;
  uint32_t align_a, align_b, align_out, align_c;  // C: out, or matmul_add's residual
  int autotune;                                   // KernelSettings::gemm_autotune
  bool operator<(const PlanKey& o) const {
    return std::tie(dtype, out_dtype, batch, m, n, k, trans_a, trans_b, align_a, align_b, align_out, align_c, autotune) <
           std::tie(o.dtype, o.out_dtype, o.batch, o.m, o.n, o.k, o.trans_a, o.trans_b, o.align_a, o.align_b, o.align_out, o.align_c, o.autotune);
  }
};

template <typename T, typename TO>
__global__ void __launch_bounds__(256) matmul_fallback_kernel(const T* __restrict__ a, const T* __restrict__ b, const TO* addend, TO* out, int64_t m,
                                                              int64_t n, int64_t k, bool trans_a, bool trans_b) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t i = blockIdx.y;
  if (j >= n) return;
  const T* ab = a + blockIdx.z * m * k;
  const T* bb = b + blockIdx.z * k * n;
  float acc = 0.0f;
  for (int64_t l = 0; l < k; l++) acc += to_float(ab[trans_a ? l * m + i : i * k + l]) * to_float(bb[trans_b ? j * k + l : l * n + j]);
  const int64_t o = blockIdx.z * m * n + i * n + j;
  out[o] = from_float<TO>(addend ? to_float(addend[o]) + acc : acc);
}

LtPlan make_plan(const OpCall& call, const PlanKey& key, const void* a, const void* b, void* out, bool accumulate, const void* residual) {
  const auto handle = static_cast<cublasLtHandle_t>(call.cublaslt);
  const cudaDataType_t type = key.dtype == DType::bf16 ? CUDA_R_16BF : CUDA_R_32F;
  const int64_t m = key.m, n = key.n, k = key.k;
  LtPlan p;
  check_lt(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
  const cublasOperation_t op_a = key.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = key.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  check_lt(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)), "set TRANSA");
  check_lt(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)), "set TRANSB");
  // b is [k, n] row-major (column-major n x k), or [n, k] when transposed (column-major k x n).
  p.lt_a = key.trans_b ? lt_layout(type, k, n, key.batch, k * n) : lt_layout(type, n, k, key.batch, k * n);
  // a is [m, k] row-major (column-major k x m), or [k, m] when transposed (column-major m x k).
  p.lt_b = key.trans_a ? lt_layout(type, m, k, key.batch, m * k) : lt_layout(type, k, m, key.batch, m * k);
  p.lt_out = lt_layout(key.out_dtype == DType::bf16 ? CUDA_R_16BF : CUDA_R_32F, n, m, key.batch, m * n);
  const auto candidates = lt_candidates(call, p, {key.align_a, key.align_b, key.align_out, key.align_c}, key.autotune);
  if (candidates.empty()) {
    p.fallback = true;
    return p;
  }
  const size_t out_bytes = static_cast<size_t>(key.batch * key.m * key.n) * dtype_bytes(key.out_dtype);
  p.algo = lt_fastest(call, candidates, out, out_bytes, accumulate, residual, [&](const cublasLtMatmulAlgo_t& algo, const float* beta, const void* c, void* d) {
    const float alpha = 1.0f;
    return cublasLtMatmul(handle, p.desc, &alpha, b, p.lt_a, a, p.lt_b, beta, c, p.lt_out, d, p.lt_out, &algo, call.cublaslt_workspace,
                          call.cublaslt_workspace_bytes, call.stream);
  });
  return p;
}

// out (+)= op(a) · op(b), or with `residual` out = residual + op(a) · op(b).
void run_gemm(const OpCall& call, const void* residual) {
  const Arg& a = call.arg("a"_arg);
  const Arg& b = call.arg("b"_arg);
  const Arg& out = call.arg("out"_arg);
  const DType dtype = float_dtype_of(call, {"a"_arg, "b"_arg});
  const bool accumulate = !residual && call.flag("accumulate"_attr);
  const void* c = residual ? residual : out.ptr;  // GEMM's C: read when beta = 1
  // The TypeScript side has checked out's dtype: the inputs' own, or f32 with outF32.
  const PlanKey key{dtype,
                    out.dtype,
                    call.i64("batch"_attr),
                    call.i64("m"_attr),
                    call.i64("n"_attr),
                    call.i64("k"_attr),
                    call.flag("transA"_attr),
                    call.flag("transB"_attr),
                    lt_alignment(a.ptr),
                    lt_alignment(b.ptr),
                    lt_alignment(out.ptr),
                    lt_alignment(c),
                    call.settings.gemm_autotune};
  // One device and one handle per process, and the JavaScript side calls from one thread.
  static std::map<PlanKey, LtPlan> plans;
  auto it = plans.find(key);
  if (it == plans.end()) it = plans.emplace(key, make_plan(call, key, a.ptr, b.ptr, out.ptr, accumulate, residual)).first;
  const LtPlan& p = it->second;
  if (p.fallback) {
    if (key.m > 65535 || key.batch > 65535) call.unsupported("this shape (cuBLASLt has no algorithm for it, and the fallback takes m and batch up to 65535)");
    with_float_type(key.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      with_float_type(key.out_dtype, [&](auto out_tag) {
        using TO = typename decltype(out_tag)::type;
        const dim3 grid(static_cast<unsigned>((key.n + 255) / 256), static_cast<unsigned>(key.m), static_cast<unsigned>(key.batch));
        check_cuda(launch_kernel(matmul_fallback_kernel<T, TO>, grid, 256, 0, call.stream, static_cast<const T*>(a.ptr), static_cast<const T*>(b.ptr),
                                 (accumulate || residual) ? static_cast<const TO*>(c) : nullptr, static_cast<TO*>(out.ptr), key.m, key.n, key.k,
                                 key.trans_a, key.trans_b),
                   "matmul_fallback_kernel");
      });
    });
    return;
  }
  const float alpha = 1.0f, beta = (accumulate || residual) ? 1.0f : 0.0f;
  check_lt(cublasLtMatmul(static_cast<cublasLtHandle_t>(call.cublaslt), p.desc, &alpha, b.ptr, p.lt_a, a.ptr, p.lt_b, &beta, c, p.lt_out, out.ptr,
                          p.lt_out, &p.algo, call.cublaslt_workspace, call.cublaslt_workspace_bytes, call.stream),
           "cublasLtMatmul");
}

}  // namespace
}  // namespace mdlm

MDLM_OP(matmul) { mdlm::run_gemm(call, nullptr); }

MDLM_OP(matmul_add) { mdlm::run_gemm(call, call.arg("residual"_arg).ptr); }
