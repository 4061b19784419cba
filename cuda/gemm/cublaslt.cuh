// cuBLASLt plumbing shared by the GEMM ops that call it (matmul.cu, matmul_fp8.cu): status
// checks, pointer alignment, column-major layouts, the heuristic's candidates and the autotune
// that times them.
//
// The algorithm: cuBLASLt's heuristic offers up to the kernel settings' gemm_autotune candidates,
// and on the first call of a shape each is timed on that call's own operands and the fastest kept
// (the heuristic's first choice leaves weight-gradient shapes, 768 x 768 over 16384 rows, at a
// third of the GPU). Timing needs a stream that is not being captured and, when accumulating, a
// scratch copy of the output (up to kTuneScratchBytes); otherwise, or with gemm_autotune 0, the
// heuristic's first choice is used. Algorithms differ in their last bits, so a process's choices
// are fixed once made, but two processes that time them may choose differently; the heuristic's
// first choice is the same in every process.
#pragma once

#include <cublasLt.h>

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "../common.cuh"

namespace mdlm {

inline void check_lt(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw std::runtime_error(std::string("cuBLASLt ") + what + ": " + cublasLtGetStatusString(s));
}

// The largest power of two (up to the 256 cuBLASLt assumes by default) dividing the address:
// views into flat buffers may start anywhere, and an algorithm picked for 256-byte alignment may
// fail or read wrongly on less.
inline uint32_t lt_alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && a % align != 0) align /= 2;
  return align;
}

// A column-major rows x cols layout, ld = rows, `batch` of them `stride` elements apart.
inline cublasLtMatrixLayout_t lt_layout(cudaDataType_t type, uint64_t rows, uint64_t cols, int64_t batch = 1, int64_t stride = 0) {
  cublasLtMatrixLayout_t l = nullptr;
  check_lt(cublasLtMatrixLayoutCreate(&l, type, rows, cols, static_cast<int64_t>(rows)), "cublasLtMatrixLayoutCreate");
  if (batch > 1) {
    const int32_t count = static_cast<int32_t>(batch);
    check_lt(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)), "set BATCH_COUNT");
    check_lt(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)), "set STRIDED_BATCH_OFFSET");
  }
  return l;
}

// A cached GEMM: its descriptors (cuBLASLt's A is our b, its B our a, C shares D's layout) and
// algorithm, or `fallback` when cuBLASLt has none for it and the op's own kernel computes it.
struct LtPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t lt_a = nullptr, lt_b = nullptr, lt_out = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool fallback = false;
};

// Pointer alignments in bytes of a GEMM's operands, in our names (C: out, or the residual).
struct LtAlignments {
  uint32_t a, b, out, c;
};

// Up to max(1, autotune) of the heuristic's algorithms for p (none: cuBLASLt cannot run it).
inline std::vector<cublasLtMatmulHeuristicResult_t> lt_candidates(const OpCall& call, const LtPlan& p, const LtAlignments& align, int autotune) {
  const auto handle = static_cast<cublasLtHandle_t>(call.cublaslt);
  cublasLtMatmulPreference_t pref = nullptr;
  check_lt(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
  const uint64_t workspace = call.cublaslt_workspace_bytes;
  check_lt(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof(workspace)), "set MAX_WORKSPACE_BYTES");
  check_lt(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align.b, sizeof(uint32_t)), "set MIN_ALIGNMENT_A");
  check_lt(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align.a, sizeof(uint32_t)), "set MIN_ALIGNMENT_B");
  check_lt(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align.c, sizeof(uint32_t)), "set MIN_ALIGNMENT_C");
  check_lt(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align.out, sizeof(uint32_t)), "set MIN_ALIGNMENT_D");
  std::vector<cublasLtMatmulHeuristicResult_t> results(std::max(1, autotune));
  int found = 0;
  const cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(handle, p.desc, p.lt_a, p.lt_b, p.lt_out, p.lt_out, pref, static_cast<int>(results.size()), results.data(), &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (s == CUBLAS_STATUS_NOT_SUPPORTED || (s == CUBLAS_STATUS_SUCCESS && found == 0)) return {};
  check_lt(s, "cublasLtMatmulAlgoGetHeuristic");
  results.resize(found);
  return results;
}

constexpr int kTimedReps = 3;
constexpr size_t kTuneScratchBytes = size_t(64) << 20;

// The fastest of the candidates on this call's operands, or the first when they cannot be timed
// here. launch(algo, beta, c, d) runs the GEMM into d with C = c: timing computes the product alone
// (beta 0, into out itself or, when the call accumulates, into a scratch of out_bytes), or the
// residual's sum as the call does (residual non-null: beta 1).
template <typename Launch>
cublasLtMatmulAlgo_t lt_fastest(const OpCall& call, const std::vector<cublasLtMatmulHeuristicResult_t>& results, void* out, size_t out_bytes, bool accumulate,
                                const void* residual, Launch&& launch) {
  const int found = static_cast<int>(results.size());
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (found < 2 || cudaStreamIsCapturing(call.stream, &capture) != cudaSuccess || capture != cudaStreamCaptureStatusNone) {
    return results[0].algo;
  }
  void* target = out;
  if (accumulate) {
    if (out_bytes > kTuneScratchBytes) return results[0].algo;
    target = call.scratch->get(out_bytes);
  }
  const float beta = residual ? 1.0f : 0.0f;
  const void* c = residual ? residual : target;
  cudaEvent_t start = nullptr, stop = nullptr;
  check_cuda(cudaEventCreate(&start), "GEMM autotune: cudaEventCreate");
  check_cuda(cudaEventCreate(&stop), "GEMM autotune: cudaEventCreate");
  cublasLtMatmulAlgo_t best = results[0].algo;
  float best_ms = std::numeric_limits<float>::infinity();
  for (int i = 0; i < found; i++) {
    if (results[i].state != CUBLAS_STATUS_SUCCESS || launch(results[i].algo, &beta, c, target) != CUBLAS_STATUS_SUCCESS) continue;  // warm-up
    bool ok = cudaEventRecord(start, call.stream) == cudaSuccess;
    for (int r = 0; ok && r < kTimedReps; r++) ok = launch(results[i].algo, &beta, c, target) == CUBLAS_STATUS_SUCCESS;
    float ms = 0;
    ok = ok && cudaEventRecord(stop, call.stream) == cudaSuccess && cudaEventSynchronize(stop) == cudaSuccess &&
         cudaEventElapsedTime(&ms, start, stop) == cudaSuccess;
    if (ok && ms < best_ms) {
      best_ms = ms;
      best = results[i].algo;
    }
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  check_cuda(cudaGetLastError(), "GEMM autotune");
  return best;
}

}  // namespace mdlm
