// Times cuda/gemm/gemm_ws.cuh's fused epilogues, in the forms the ops launch them, beside
// cuBLASLt's plain product of the same shape (the unfused path: cuBLASLt, then the element-wise
// kernel), on the training shapes of llama-124m and llama-1.3b, in one process on one GPU, and
// checks their outputs: the rope epilogue against a float64 host reference on a sample of rows,
// SwiGLU's forward and backward against the same formula over cuBLASLt's product. cuBLASLt gets
// what cuda/gemm/matmul.cu gives it by default: the heuristic's first 8 algorithms, the fastest
// kept.
//
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Icuda bench/matmul_ws.cu -lcublasLt -o /tmp/matmul_ws \
//     && /tmp/matmul_ws [reps] [shape]   (bench/cuda-run.sh matmul-ws; shape: only the shapes whose label contains it)
//
// Prints, a shape a line: ms and TFLOP/s of cuBLASLt's product; for a q/k projection the rope
// epilogue's ms in both schedules (ping-pong 128 wide, cooperative 256 wide; matmul_rope takes the
// latter where q's columns allow it) and their worst error against float64; for a gate/up
// projection the SwiGLU epilogue's ms in both forms (gemm::swiglu_epilogue picks one by the
// product's size) and their worst difference; for a dh product (a transposed) SwiGLU's backward
// epilogue's ms and difference. All by TMA stores, as the ops store them.
// Exits non-zero when a difference or error is over 5e-3.
#include <cublasLt.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "gemm/gemm_ws.cuh"

namespace {

using mdlm::gemm::bf16;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}
void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "%s: %s\n", what, cublasLtGetStatusString(s));
    std::exit(1);
  }
}

struct Shape {
  const char* label;
  int m, n, k;
  int rope_d, split;  // rope_d > 0: a q/k projection, q the first `split` columns
  bool swiglu;        // the gate/up projection [Gᵀ; Uᵀ] (m = 2F): timed with the SwiGLU epilogue
  bool a_t;           // a stored [k][m]: dh = Wdownᵀ · doutᵀ (m = F), timed with SwiGLU's backward epilogue
};

// Milliseconds a launch of f, the mean of `reps` after a warm-up.
template <typename F>
float time_ms(F f, int reps) {
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  f();
  check(cudaEventRecord(start), "record");
  for (int r = 0; r < reps; ++r) f();
  check(cudaEventRecord(stop), "record");
  check(cudaEventSynchronize(stop), "sync");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms / reps;
}

// out[m][n] = a[m][k] · w[n][k]ᵀ by cuBLASLt (column-major: outᵀ = wᵀᵀ·aᵀ, A = w transposed).
struct Lt {
  cublasLtHandle_t handle;
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t la, lb, lc;
  cublasLtMatmulAlgo_t algo;
  void* workspace;
  size_t workspace_bytes = size_t(32) << 20;
  const bf16 *a, *w;
  bf16* out;
  void run() const {
    const float alpha = 1.f, beta = 0.f;
    check(cublasLtMatmul(handle, desc, &alpha, w, la, a, lb, &beta, out, lc, out, lc, &algo, workspace, workspace_bytes, 0), "cublasLtMatmul");
  }
};

Lt make_lt(cublasLtHandle_t handle, const bf16* a, const bf16* w, bf16* out, const Shape& s, void* workspace, int reps) {
  // a [m][k] is the column-major k × m matrix (op N); a [k][m] (a_t) the column-major m × k (op T).
  Lt lt{handle};
  lt.a = a, lt.w = w, lt.out = out, lt.workspace = workspace;
  check(cublasLtMatmulDescCreate(&lt.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc");
  const cublasOperation_t t = CUBLAS_OP_T, op_b = s.a_t ? CUBLAS_OP_T : CUBLAS_OP_N;
  check(cublasLtMatmulDescSetAttribute(lt.desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t)), "transa");
  check(cublasLtMatmulDescSetAttribute(lt.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)), "transb");
  check(cublasLtMatrixLayoutCreate(&lt.la, CUDA_R_16BF, s.k, s.n, s.k), "layout a");
  check(s.a_t ? cublasLtMatrixLayoutCreate(&lt.lb, CUDA_R_16BF, s.m, s.k, s.m) : cublasLtMatrixLayoutCreate(&lt.lb, CUDA_R_16BF, s.k, s.m, s.k), "layout b");
  check(cublasLtMatrixLayoutCreate(&lt.lc, CUDA_R_16BF, s.n, s.m, s.n), "layout c");
  cublasLtMatmulPreference_t pref;
  check(cublasLtMatmulPreferenceCreate(&pref), "pref");
  check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &lt.workspace_bytes, sizeof(lt.workspace_bytes)), "pref ws");
  cublasLtMatmulHeuristicResult_t results[8];
  int found = 0;
  check(cublasLtMatmulAlgoGetHeuristic(handle, lt.desc, lt.la, lt.lb, lt.lc, lt.lc, pref, 8, results, &found), "heuristic");
  cublasLtMatmulPreferenceDestroy(pref);
  float best = INFINITY;
  cublasLtMatmulAlgo_t keep = results[0].algo;
  for (int i = 0; i < found; ++i) {
    lt.algo = results[i].algo;
    const float ms = time_ms([&] { lt.run(); }, std::max(3, reps / 5));
    if (ms < best) best = ms, keep = results[i].algo;
  }
  lt.algo = keep;
  return lt;
}

__global__ void fill_normal(bf16* x, size_t n, uint64_t seed) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  // two uniform hashes of (seed, i) through Box-Muller: inputs, not statistics
  uint64_t h = (i + 1) * 0x9e3779b97f4a7c15ull ^ seed;
  h ^= h >> 31, h *= 0xbf58476d1ce4e5b9ull, h ^= h >> 27;
  const float u1 = ((h >> 40) + 1) * (1.f / 16777217.f), u2 = ((h >> 16) & 0xffffff) * (1.f / 16777216.f);
  x[i] = __float2bfloat16_rn(sqrtf(-2.f * logf(u1)) * cospif(2.f * u2));
}

using mdlm::gemm::Schedule;

// The rope epilogue's two forms: schedule and tile width.
struct Variant {
  const char* name;
  Schedule sched;
  int tile_n;
};
constexpr Variant kRopeForms[] = {{"ping 128", mdlm::gemm::kPingPong, 128}, {"coop 256", mdlm::gemm::kCooperative, 256}};
constexpr int kNumRopeForms = sizeof(kRopeForms) / sizeof(kRopeForms[0]);

void launch(const mdlm::gemm::Params& p, int sms, int epilogue, Schedule sched) {
  check(mdlm::gemm::launch(p, epilogue, sched, sms, nullptr), "ours: launch");
}

std::vector<float> download(const bf16* d, size_t n) {
  std::vector<bf16> h(n);
  check(cudaMemcpy(h.data(), d, n * sizeof(bf16), cudaMemcpyDeviceToHost), "download");
  std::vector<float> f(n);
  for (size_t i = 0; i < n; ++i) f[i] = __bfloat162float(h[i]);
  return f;
}

// ‖got − want‖ / ‖want‖.
double rel_diff(const std::vector<float>& got, const std::vector<float>& want) {
  double d2 = 0, r2 = 0;
  for (size_t i = 0; i < want.size(); ++i) d2 += (got[i] - want[i]) * (double)(got[i] - want[i]), r2 += want[i] * (double)want[i];
  return std::sqrt(d2 / r2);
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 50;
  const char* only = argc > 2 ? argv[2] : "";
  const Shape shapes[] = {
      {"124M q/k proj 16384x1536x768 (rope D64)", 16384, 1536, 768, 64, 768},
      {"124M gate/up [2F, rows] 4096x16384x768", 4096, 16384, 768, 0, 0, true},
      {"1.3B q/k proj 16384x4096x2048 (rope D128)", 16384, 4096, 2048, 128, 2048},
      {"1.3B gate/up [2F, rows] 11008x16384x2048", 11008, 16384, 2048, 0, 0, true},
      // Between the two presets' gate/up shapes, where gemm::swiglu_epilogue's bound (5e11 FLOP)
      // lies: 124M's F with 1.3B's d, 1.3B's F with 124M's d, and two sizes between (1.8e11, 4.1e11).
      {"gate/up 124M F, d 2048 4096x16384x2048", 4096, 16384, 2048, 0, 0, true},
      {"gate/up 1.3B F, d 768 11008x16384x768", 11008, 16384, 768, 0, 0, true},
      {"gate/up F 2752, d 1024 5504x16384x1024", 5504, 16384, 1024, 0, 0, true},
      {"gate/up F 4096, d 1536 8192x16384x1536", 8192, 16384, 1536, 0, 0, true},
      {"124M dh [F, rows] 2048x16384x768 (a transposed)", 2048, 16384, 768, 0, 0, false, true},
      {"1.3B dh [F, rows] 5504x16384x2048 (a transposed)", 5504, 16384, 2048, 0, 0, false, true},
  };
  int sms = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "SMs");
  cublasLtHandle_t handle;
  check(cublasLtCreate(&handle), "cublasLtCreate");
  void* workspace;
  check(cudaMalloc(&workspace, size_t(32) << 20), "workspace");
  std::printf("%-50s %8s %6s | rope:", "shape", "lt ms", "TF/s");
  for (const Variant& v : kRopeForms) std::printf(" %8s", v.name);
  std::printf(" %8s | swiglu %8s %8s %8s | swiglu bwd %8s %8s\n", "rope err", "ping ms", "deep ms", "diff", "ping 128", "diff");
  int failed = 0;
  for (const Shape& s : shapes) {
    if (!std::strstr(s.label, only)) continue;
    bf16 *a, *w, *out_lt, *out, *out2 = nullptr;  // out: the fused kernels' output
    const size_t na = (size_t)s.m * s.k, nw = (size_t)s.n * s.k, no = (size_t)s.m * s.n;
    check(cudaMalloc(&a, na * 2), "a");
    check(cudaMalloc(&w, nw * 2), "w");
    check(cudaMalloc(&out_lt, no * 2), "out");
    check(cudaMalloc(&out, no * 2), "out");
    fill_normal<<<(na + 255) / 256, 256>>>(a, na, 1);
    fill_normal<<<(nw + 255) / 256, 256>>>(w, nw, 2);
    const Lt lt = make_lt(handle, a, w, out_lt, s, workspace, reps);
    const float lt_ms = time_ms([&] { lt.run(); }, reps);
    // The fused kernels' outputs against cuBLASLt's: both round f32 sums of the same products to bf16.
    const std::vector<float> want = download(out_lt, no);
    const double tflop = 2.0 * s.m * s.n * s.k / 1e12;
    float rope_ms[kNumRopeForms];
    std::fill(rope_ms, rope_ms + kNumRopeForms, NAN);
    double rope_err = 0;
    if (s.rope_d) {
      // rope: q into out (split columns), k into out2; positions 0..T-1 per sequence of 1024
      const int half = s.rope_d / 2, max_pos = 2048;
      std::vector<int> pos(s.m);
      for (int i = 0; i < s.m; ++i) pos[i] = i % 1024;
      int* positions;
      float2* table;
      check(cudaMalloc(&positions, s.m * sizeof(int)), "positions");
      check(cudaMalloc(&table, (size_t)max_pos * half * sizeof(float2)), "table");
      check(cudaMemcpy(positions, pos.data(), s.m * sizeof(int), cudaMemcpyHostToDevice), "positions");
      mdlm::gemm::make_rope_table<<<(max_pos * half + 255) / 256, 256>>>(table, max_pos, s.rope_d, 10000.0);
      check(cudaMalloc(&out2, (size_t)s.m * (s.n - s.split) * 2), "out2");
      // Six rows (the first four and the last two) against float64, with the table's angles as
      // the kernel reads them.
      std::vector<float2> cs((size_t)max_pos * half);
      check(cudaMemcpy(cs.data(), table, cs.size() * sizeof(float2), cudaMemcpyDeviceToHost), "table");
      std::vector<bf16> ha(na), hw(nw);
      check(cudaMemcpy(ha.data(), a, na * 2, cudaMemcpyDeviceToHost), "a");
      check(cudaMemcpy(hw.data(), w, nw * 2, cudaMemcpyDeviceToHost), "w");
      auto error = [&] {
        const std::vector<float> q = download(out, (size_t)s.m * s.split), k = download(out2, (size_t)s.m * (s.n - s.split));
        double e2 = 0, f2 = 0;
        for (int i : {0, 1, 2, 3, s.m - 2, s.m - 1}) {
          std::vector<double> ref(s.n);
          for (int j = 0; j < s.n; ++j) {
            double r = 0;
            for (int t = 0; t < s.k; ++t) r += (double)__bfloat162float(ha[(size_t)i * s.k + t]) * __bfloat162float(hw[(size_t)j * s.k + t]);
            ref[j] = r;
          }
          for (int j = 0; j < s.n; ++j) {
            const int e = j % s.rope_d;
            if (e >= half) continue;
            const float2 c = cs[(size_t)pos[i] * half + e];
            const double lo = ref[j], hi = ref[j + half];
            ref[j] = lo * c.x - hi * c.y, ref[j + half] = hi * c.x + lo * c.y;
          }
          for (int j = 0; j < s.n; ++j) {
            const double g = j < s.split ? q[(size_t)i * s.split + j] : k[(size_t)i * (s.n - s.split) + j - s.split];
            e2 += (g - ref[j]) * (g - ref[j]), f2 += ref[j] * ref[j];
          }
        }
        return std::sqrt(e2 / f2);
      };
      for (int vi = 0; vi < kNumRopeForms; ++vi) {
        mdlm::gemm::Params pr;
        mdlm::gemm::make_params(pr, a, w, out, 1, s.m, s.n, s.k, s.split, kRopeForms[vi].tile_n);
        pr.out2 = out2, pr.ldo2 = s.n - s.split, pr.split = s.split, pr.positions = positions, pr.rope_cs = table;
        pr.rope_positions = max_pos, pr.rope_base = 10000.0;
        if (!mdlm::gemm::use_tma_store(pr)) std::printf("%s: no TMA stores for %s with rope\n", s.label, kRopeForms[vi].name);
        check(cudaMemset(out, 0xff, (size_t)s.m * s.split * 2), "poison");
        check(cudaMemset(out2, 0xff, (size_t)s.m * (s.n - s.split) * 2), "poison");
        rope_ms[vi] = time_ms([&] { launch(pr, sms, s.rope_d, kRopeForms[vi].sched); }, reps);
        check(cudaDeviceSynchronize(), "ours, rope");
        rope_err = std::max(rope_err, error());
      }
      failed += !(rope_err <= 5e-3);
      cudaFree(positions), cudaFree(table), cudaFree(out2);
    }
    float swiglu_ms[2] = {NAN, NAN};  // kSwiglu and kSwigluDeep, by TMA stores
    double swiglu_diff = NAN;
    if (s.swiglu) {
      // G and U against cuBLASLt's product (the same bf16 roundings of f32 sums), h against
      // silu(G)·U computed here from cuBLASLt's G and U.
      const int F = s.m / 2, rows = s.n;
      bf16* h;
      check(cudaMalloc(&h, (size_t)F * rows * 2), "h");
      mdlm::gemm::Params ps;
      if (const char* err = mdlm::gemm::make_swiglu_params(ps, a, w, out, h, F, rows, s.k)) {
        std::printf("%s: %s\n", s.label, err);
        return 1;
      }
      std::vector<float> h_ref((size_t)F * rows);
      for (size_t i = 0; i < h_ref.size(); ++i) {
        const float g = want[i], u = want[h_ref.size() + i];
        h_ref[i] = __bfloat162float(__float2bfloat16_rn(g / (1.f + std::exp(-g)) * u));
      }
      swiglu_diff = 0;
      if (!mdlm::gemm::use_tma_store(ps)) std::printf("%s: no TMA stores for swiglu\n", s.label);
      const int forms[2] = {mdlm::gemm::kSwiglu, mdlm::gemm::kSwigluDeep};
      for (int f = 0; f < 2; ++f) {
        check(cudaMemset(out, 0xff, no * 2), "poison");
        check(cudaMemset(h, 0xff, h_ref.size() * 2), "poison");
        swiglu_ms[f] = time_ms([&] { launch(ps, sms, forms[f], mdlm::gemm::kPingPong); }, reps);
        check(cudaDeviceSynchronize(), "ours, swiglu");
        swiglu_diff = std::max({swiglu_diff, rel_diff(download(out, no), want), rel_diff(download(h, h_ref.size()), h_ref)});
      }
      failed += !(swiglu_diff <= 5e-3);
      cudaFree(h);
    }
    float bwd_ms = NAN;
    double bwd_diff = NAN;
    if (s.a_t) {
      // SwiGLU's backward on the spot: dG and dU from dh (cuBLASLt's, as the unfused path would
      // store it) and random G and U, against the same formula here.
      const int F = s.m, rows = s.n;
      const size_t ngu = (size_t)2 * F * rows;
      bf16 *gu, *dgu;
      check(cudaMalloc(&gu, ngu * 2), "gu");
      check(cudaMalloc(&dgu, ngu * 2), "dgu");
      fill_normal<<<(ngu + 255) / 256, 256>>>(gu, ngu, 3);
      // dG then dU, [2F][rows], as the kernel writes them
      const std::vector<float> g_u = download(gu, ngu);
      std::vector<float> ref(ngu);
      for (size_t i = 0; i < (size_t)F * rows; ++i) {
        const float dh = want[i], g = g_u[i], u = g_u[(size_t)F * rows + i], sg = 1.f / (1.f + std::exp(-g));
        ref[i] = __bfloat162float(__float2bfloat16_rn(dh * u * (sg + g * sg * (1.f - sg))));
        ref[(size_t)F * rows + i] = __bfloat162float(__float2bfloat16_rn(dh * g * sg));
      }
      mdlm::gemm::Params pb;
      if (const char* err = mdlm::gemm::make_swiglu_bwd_params(pb, a, w, dgu, gu, F, rows, s.k)) {
        std::printf("%s: %s\n", s.label, err);
        return 1;
      }
      check(cudaMemset(dgu, 0xff, ngu * 2), "poison");
      bwd_ms = time_ms([&] { launch(pb, sms, mdlm::gemm::kSwigluBwd, mdlm::gemm::kPingPong); }, reps);
      check(cudaDeviceSynchronize(), "ours, swiglu backward");
      bwd_diff = rel_diff(download(dgu, ngu), ref);
      failed += !(bwd_diff <= 5e-3);
      cudaFree(gu), cudaFree(dgu);
    }
    std::printf("%-50s %8.4f %6.1f |      ", s.label, lt_ms, tflop / lt_ms * 1e3);
    for (int vi = 0; vi < kNumRopeForms; ++vi) std::printf(" %8.4f", rope_ms[vi]);
    std::printf(" %8.1e | swiglu %8.4f %8.4f %8.1e | swiglu bwd %8.4f %8.1e\n", s.rope_d ? rope_err : NAN, swiglu_ms[0], swiglu_ms[1], swiglu_diff, bwd_ms, bwd_diff);
    std::fflush(stdout);
    cudaFree(a), cudaFree(w), cudaFree(out_lt), cudaFree(out);
  }
  if (failed) std::printf("%d check(s) over 5e-3\n", failed);
  return failed ? 1 : 0;
}
