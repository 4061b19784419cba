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
// Descriptors and the algorithm are made once per (dtype, shape, transposes, pointer alignment)
// and cached; the workspace is the addon's. The algorithm: cuBLASLt's heuristic offers up to
// kCandidates (MDLM_MATMUL_CANDIDATES=N: up to N, at most 64, read once), and on the first call of
// a shape each is timed on that call's own operands and the
// fastest kept (the heuristic's first choice left weight-gradient shapes, 768 x 768 over 16384
// rows, at a third of the GPU). Timing needs a stream that is not being captured and, when
// accumulating, a scratch copy of the output (up to kTuneScratchBytes); otherwise, or with
// MDLM_MATMUL_AUTOTUNE=0, the heuristic's first choice is used. Algorithms differ in their last
// bits, so a process's choices are fixed once made, but two processes may choose differently.
// Should cuBLASLt offer no algorithm for a shape (odd leading dimensions with 2-byte alignment,
// say), a plain kernel computes it: one thread per output, f32 sums in k order.
//
// MDLM_MATMUL_WS=coop|ping|coop256 (read at every call): the bf16 products with transB (x·Wᵀ, and
// with transA too where m is a multiple of 8), bf16 out written, not accumulated, operands 16-byte
// aligned and k a multiple of 8, on an sm_90 GPU go through cuda/matmul_ws.cuh's kernel in that
// schedule and tile width (128 columns, or 256) instead, its output tiles leaving by TMA stores
// with MDLM_MATMUL_WS_TMA=1: an A/B of our Hopper GEMM against cuBLASLt in training, the step
// before element-wise work is fused into its epilogue.
#include <cublasLt.h>

#include <algorithm>
#include <limits>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "common.cuh"
#include "matmul_ws.cuh"

namespace mdlm {
namespace {

void check_lt(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw std::runtime_error(std::string("cuBLASLt ") + what + ": " + cublasLtGetStatusString(s));
}

// The largest power of two (up to the 256 cuBLASLt assumes by default) dividing the address:
// views into flat buffers may start anywhere, and an algorithm picked for 256-byte alignment may
// fail or read wrongly on less.
uint32_t alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && a % align != 0) align /= 2;
  return align;
}

constexpr int kCandidates = 8, kMostCandidates = 64;
constexpr int kTimedReps = 3;
constexpr size_t kTuneScratchBytes = size_t(64) << 20;

struct PlanKey {
  DType dtype, out_dtype;
  int64_t batch, m, n, k;
  bool trans_a, trans_b;
  uint32_t align_a, align_b, align_out, align_c;  // C: out, or matmul_add's residual
  bool operator<(const PlanKey& o) const {
    return std::tie(dtype, out_dtype, batch, m, n, k, trans_a, trans_b, align_a, align_b, align_out, align_c) <
           std::tie(o.dtype, o.out_dtype, o.batch, o.m, o.n, o.k, o.trans_a, o.trans_b, o.align_a, o.align_b, o.align_out, o.align_c);
  }
};

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t lt_a = nullptr, lt_b = nullptr, lt_out = nullptr;  // cuBLASLt's A (our b), B (our a), D
  cublasLtMatmulAlgo_t algo{};
  bool fallback = false;  // cuBLASLt had no algorithm: matmul_fallback_kernel
};

template <typename T, typename TO>
__global__ void __launch_bounds__(256) matmul_fallback_kernel(const T* __restrict__ a, const T* __restrict__ b, const TO* addend, TO* out, int64_t m,
                                                              int64_t n, int64_t k, bool trans_a, bool trans_b) {
  wait_previous_kernel();
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

// A column-major rows x cols layout, ld = rows, `batch` of them `stride` elements apart.
cublasLtMatrixLayout_t layout(cudaDataType_t type, uint64_t rows, uint64_t cols, int64_t batch, int64_t stride) {
  cublasLtMatrixLayout_t l = nullptr;
  check_lt(cublasLtMatrixLayoutCreate(&l, type, rows, cols, static_cast<int64_t>(rows)), "cublasLtMatrixLayoutCreate");
  if (batch > 1) {
    const int32_t count = static_cast<int32_t>(batch);
    check_lt(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)), "set BATCH_COUNT");
    check_lt(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)), "set STRIDED_BATCH_OFFSET");
  }
  return l;
}

// How many of the heuristic's algorithms are timed: kCandidates unless MDLM_MATMUL_CANDIDATES says.
int candidates() {
  static const int count = [] {
    const std::string knob = env_knob("MDLM_MATMUL_CANDIDATES");
    if (knob.empty()) return kCandidates;
    char* end = nullptr;
    const long n = std::strtol(knob.c_str(), &end, 10);
    if (*end != '\0' || n < 1 || n > kMostCandidates) {
      throw OpError("BAD_ARGUMENT", "MDLM_MATMUL_CANDIDATES='" + knob + "' is not a count from 1 to " + std::to_string(kMostCandidates));
    }
    return static_cast<int>(n);
  }();
  return count;
}

bool autotune_enabled() {
  static const bool on = env_knob("MDLM_MATMUL_AUTOTUNE") != "0";
  return on;
}

// The fastest of the heuristic's algorithms on this call's operands (out = a·b, beta = 0, into out
// itself or, when the call accumulates, into a scratch of the same size; matmul_add's out =
// residual + a·b as it is), or the first when they cannot be timed here.
cublasLtMatmulAlgo_t fastest_algo(const OpCall& call, const Plan& p, const PlanKey& key, const cublasLtMatmulHeuristicResult_t* results, int found,
                                  const void* a, const void* b, void* out, bool accumulate, const void* residual) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (found < 2 || !autotune_enabled() || cudaStreamIsCapturing(call.stream, &capture) != cudaSuccess || capture != cudaStreamCaptureStatusNone) {
    return results[0].algo;
  }
  const size_t out_bytes = static_cast<size_t>(key.batch * key.m * key.n) * dtype_bytes(key.out_dtype);
  void* target = out;
  if (accumulate) {
    if (out_bytes > kTuneScratchBytes) return results[0].algo;
    target = call.scratch->get(out_bytes);
  }
  const auto handle = static_cast<cublasLtHandle_t>(call.cublaslt);
  const float alpha = 1.0f, beta = residual ? 1.0f : 0.0f;
  const void* c = residual ? residual : target;
  const auto launch = [&](const cublasLtMatmulAlgo_t& algo) {
    return cublasLtMatmul(handle, p.desc, &alpha, b, p.lt_a, a, p.lt_b, &beta, c, p.lt_out, target, p.lt_out, &algo, call.cublaslt_workspace,
                          call.cublaslt_workspace_bytes, call.stream);
  };
  cudaEvent_t start = nullptr, stop = nullptr;
  check_cuda(cudaEventCreate(&start), "matmul autotune: cudaEventCreate");
  check_cuda(cudaEventCreate(&stop), "matmul autotune: cudaEventCreate");
  cublasLtMatmulAlgo_t best = results[0].algo;
  float best_ms = std::numeric_limits<float>::infinity();
  for (int i = 0; i < found; i++) {
    if (results[i].state != CUBLAS_STATUS_SUCCESS || launch(results[i].algo) != CUBLAS_STATUS_SUCCESS) continue;  // warm-up
    bool ok = cudaEventRecord(start, call.stream) == cudaSuccess;
    for (int r = 0; ok && r < kTimedReps; r++) ok = launch(results[i].algo) == CUBLAS_STATUS_SUCCESS;
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
  check_cuda(cudaGetLastError(), "matmul autotune");
  return best;
}

Plan make_plan(const OpCall& call, const PlanKey& key, const void* a, const void* b, void* out, bool accumulate, const void* residual) {
  const auto handle = static_cast<cublasLtHandle_t>(call.cublaslt);
  const cudaDataType_t type = key.dtype == DType::bf16 ? CUDA_R_16BF : CUDA_R_32F;
  const int64_t m = key.m, n = key.n, k = key.k;
  Plan p;
  check_lt(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
  const cublasOperation_t op_a = key.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = key.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  check_lt(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)), "set TRANSA");
  check_lt(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)), "set TRANSB");
  // b is [k, n] row-major (column-major n x k), or [n, k] when transposed (column-major k x n).
  p.lt_a = key.trans_b ? layout(type, k, n, key.batch, k * n) : layout(type, n, k, key.batch, k * n);
  // a is [m, k] row-major (column-major k x m), or [k, m] when transposed (column-major m x k).
  p.lt_b = key.trans_a ? layout(type, m, k, key.batch, m * k) : layout(type, k, m, key.batch, m * k);
  p.lt_out = layout(key.out_dtype == DType::bf16 ? CUDA_R_16BF : CUDA_R_32F, n, m, key.batch, m * n);

  cublasLtMatmulPreference_t pref = nullptr;
  check_lt(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
  const uint64_t workspace = call.cublaslt_workspace_bytes;
  check_lt(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof(workspace)), "set MAX_WORKSPACE_BYTES");
  check_lt(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &key.align_b, sizeof(uint32_t)), "set MIN_ALIGNMENT_A");
  check_lt(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &key.align_a, sizeof(uint32_t)), "set MIN_ALIGNMENT_B");
  check_lt(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &key.align_c, sizeof(uint32_t)), "set MIN_ALIGNMENT_C");
  check_lt(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &key.align_out, sizeof(uint32_t)), "set MIN_ALIGNMENT_D");
  std::vector<cublasLtMatmulHeuristicResult_t> results(candidates());
  int found = 0;
  const cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(handle, p.desc, p.lt_a, p.lt_b, p.lt_out, p.lt_out, pref, static_cast<int>(results.size()), results.data(), &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (s == CUBLAS_STATUS_NOT_SUPPORTED || (s == CUBLAS_STATUS_SUCCESS && found == 0)) {
    p.fallback = true;
    return p;
  }
  check_lt(s, "cublasLtMatmulAlgoGetHeuristic");
  p.algo = fastest_algo(call, p, key, results.data(), found, a, b, out, accumulate, residual);
  return p;
}

// The call through gemm_ws_nt when MDLM_MATMUL_WS asks for it and the call is one it takes (see
// the top of the file); false when it is not.
bool launch_ws(const OpCall& call, const PlanKey& key, const void* a, const void* b, void* out, bool accumulate) {
  const std::string knob = env_knob("MDLM_MATMUL_WS");
  const int tile_n = knob == "coop256" ? 256 : 128;
  const gemm::Schedule sched = knob == "ping" ? gemm::kPingPong : gemm::kCooperative;
  if ((knob != "coop" && knob != "coop256" && knob != "ping") || key.dtype != DType::bf16 || key.out_dtype != DType::bf16 || accumulate || !key.trans_b || key.k % 8 != 0 || (key.trans_a && key.m % 8 != 0) ||
      key.align_a < 16 || key.align_b < 16 || key.align_out < 16 || !call.device || call.device->major != 9 ||
      std::max({key.batch, key.m, key.n, key.k}) > std::numeric_limits<int>::max()) {
    return false;
  }
  gemm::Params p;
  if (gemm::make_params(p, a, b, static_cast<bf16*>(out), (int)key.batch, (int)key.m, (int)key.n, (int)key.k, key.n, tile_n, key.trans_a)) return false;
  if (env_knob("MDLM_MATMUL_WS_TMA") == "1") gemm::use_tma_store(p);  // where the output allows it
  check_cuda(gemm::launch(p, gemm::kStore, sched, call.device->multiProcessorCount, call.stream), "gemm_ws_nt");
  return true;
}

// out (+)= op(a) · op(b), or with `residual` out = residual + op(a) · op(b).
void run_gemm(const OpCall& call, const void* residual) {
  const Arg& a = call.arg("a");
  const Arg& b = call.arg("b");
  const Arg& out = call.arg("out");
  const DType dtype = float_dtype_of(call, {"a", "b"});
  const bool accumulate = !residual && call.flag("accumulate");
  const void* c = residual ? residual : out.ptr;  // GEMM's C: read when beta = 1
  // The TypeScript side has checked out's dtype: the inputs' own, or f32 with outF32.
  const PlanKey key{dtype,
                    out.dtype,
                    call.i64("batch"),
                    call.i64("m"),
                    call.i64("n"),
                    call.i64("k"),
                    call.flag("transA"),
                    call.flag("transB"),
                    alignment(a.ptr),
                    alignment(b.ptr),
                    alignment(out.ptr),
                    alignment(c)};
  if (!residual && launch_ws(call, key, a.ptr, b.ptr, out.ptr, accumulate)) return;
  // One device and one handle per process, and the JavaScript side calls from one thread.
  static std::map<PlanKey, Plan> plans;
  auto it = plans.find(key);
  if (it == plans.end()) it = plans.emplace(key, make_plan(call, key, a.ptr, b.ptr, out.ptr, accumulate, residual)).first;
  const Plan& p = it->second;
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

MDLM_OP(matmul_add) { mdlm::run_gemm(call, call.arg("residual").ptr); }
