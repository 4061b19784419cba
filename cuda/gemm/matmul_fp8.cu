// matmul_fp8: out (+)= (a · aScaleInv) · (b · bScaleInv)ᵀ with a [m, k] and b [n, k] in FP8 (E4M3
// or E5M2) and the dequantisation factors in device memory, as src/ops/matmul_fp8.ts defines it;
// matmul_fp8_add: out = residual + the product. cuBLASLt's FP8 GEMM on sm_89+: CUBLAS_COMPUTE_32F
// with f32 scales, the factors as its A/B scale pointers, out in bf16 or f32 (C in out's type).
// Both operands have k contiguous: in cuBLASLt's column-major terms the "TN" layout its FP8
// kernels take, cuBLASLt's A our b (k x n, transposed), its B our a (k x m), D the column-major
// [n, m] that is our row-major out. Fast accumulation stays off: the FP8 tensor cores' partial
// sums are promoted to f32 as they go, which the op's f32 tolerance needs.
//
// Per-block factors (aBlocks / bBlocks '1x128' or '128x128', src/ops/quantize_fp8_blockwise.ts's
// layouts) take cuBLASLt's block-scaled FP8 GEMM (cuBLASLt 12.9+, Hopper): the scale modes
// CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F and BLK128x128_32F, cuBLASLt's A mode from b's blocks,
// its B mode from a's. It takes 1x128 · 128x128 either way round and 1x128 · 1x128, not
// 128x128 · 128x128 nor a per-tensor operand beside a blocked one; its outer dimensions want
// multiples of 8 (n always, m with a 1x128 a), where the factors' rows need no padding, and the
// factors 16-byte aligned.
//
// Plans are cached and algorithms autotuned as matmul's (cuda/gemm/cublaslt.cuh). A GPU below
// sm_89 (sm_90 for blocks), k or a pointer off the 16 bytes FP8 tensor cores need, a block
// combination or shape cuBLASLt does not take, or one it has no algorithm for runs a plain kernel:
// one thread per output, the codes decoded, f32 sums in k order, per 128 of k with blocks (each
// block's sum times its two factors added to the total).
#include <cublasLt.h>

#include <map>
#include <tuple>

#include "../fp8.cuh"
#include "cublaslt.cuh"

namespace mdlm {
namespace {

constexpr int64_t kBlock = 128;  // a block's length along k (and down the rows, 128x128)

// What an operand's factors scale (the op's aBlocks / bBlocks).
enum class Blocks { tensor, vec128, blk128 };

Blocks blocks_attr(const OpCall& call, AttrName name) {
  const std::string& s = call.str(name);
  if (s == "tensor") return Blocks::tensor;
  if (s == "1x128") return Blocks::vec128;
  if (s == "128x128") return Blocks::blk128;
  call.unsupported("FP8 scaling blocks '" + s + "'");
}

struct Fp8PlanKey {
  Fp8 a_format, b_format;
  Blocks a_blocks, b_blocks;
  DType out_dtype;
  int64_t m, n, k;
  uint32_t align_a, align_b, align_out, align_c;  // C: out, or matmul_fp8_add's residual
  bool scales16;                                  // both factor arrays on 16-byte boundaries
  int autotune;                                   // KernelSettings::gemm_autotune
  bool operator<(const Fp8PlanKey& o) const {
    return std::tie(a_format, b_format, a_blocks, b_blocks, out_dtype, m, n, k, align_a, align_b, align_out, align_c, scales16, autotune) <
           std::tie(o.a_format, o.b_format, o.a_blocks, o.b_blocks, o.out_dtype, o.m, o.n, o.k, o.align_a, o.align_b, o.align_out, o.align_c, o.scales16,
                    o.autotune);
  }
};

// An operand's factors: one, or per block at row * ld + k block (1x128: k block * ld + row).
struct OperandScales {
  const float* p;
  Blocks blocks;
  int64_t ld;
};

OperandScales operand_scales(const void* p, Blocks blocks, int64_t rows, int64_t k) {
  const auto round4 = [](int64_t v) { return (v + 3) / 4 * 4; };
  const int64_t ld = blocks == Blocks::vec128 ? round4(rows) : round4((k + kBlock - 1) / kBlock);
  return {static_cast<const float*>(p), blocks, ld};
}

__device__ __forceinline__ float block_factor(const OperandScales& s, int64_t row, int64_t kb) {
  if (s.blocks == Blocks::tensor) return s.p[0];
  return s.blocks == Blocks::vec128 ? s.p[kb * s.ld + row] : s.p[row / kBlock * s.ld + kb];
}

template <Fp8 FA, Fp8 FB, typename TO>
__global__ void __launch_bounds__(256) matmul_fp8_fallback_kernel(const uint8_t* __restrict__ a, const uint8_t* __restrict__ b, OperandScales sa,
                                                                  OperandScales sb, const TO* addend, TO* out, int64_t m, int64_t n, int64_t k) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= n) return;
  // per tensor: one span, the whole of k
  const int64_t span = sa.blocks == Blocks::tensor && sb.blocks == Blocks::tensor ? k : kBlock;
  for (int64_t i = blockIdx.y; i < m; i += gridDim.y) {
    float acc = 0.0f;
    for (int64_t l0 = 0; l0 < k; l0 += span) {
      const int64_t l1 = l0 + span < k ? l0 + span : k;
      float part = 0.0f;
      for (int64_t l = l0; l < l1; l++) part += Fp8Format<FA>::Mini::decode(a[i * k + l]) * Fp8Format<FB>::Mini::decode(b[j * k + l]);
      const float s = block_factor(sa, i, l0 / kBlock) * block_factor(sb, j, l0 / kBlock);  // powers of two: exact
      acc = l0 == 0 ? part * s : acc + part * s;
    }
    const int64_t o = i * n + j;
    out[o] = from_float<TO>(addend ? to_float(addend[o]) + acc : acc);
  }
}

cudaDataType_t lt_fp8_type(Fp8 f) { return f == Fp8::e4m3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2; }

// cuBLASLt's scale mode for an operand's blocks.
int32_t lt_scale_mode(Blocks b) {
  return b == Blocks::tensor ? CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F
         : b == Blocks::vec128 ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F
                               : CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
}

// Whether cuBLASLt's block-scaled FP8 GEMM may take a call with blocked factors (the header's rules).
bool lt_takes_blocks(const OpCall& call, const Fp8PlanKey& key) {
  if (key.a_blocks == Blocks::tensor || key.b_blocks == Blocks::tensor) return false;
  if (key.a_blocks == Blocks::blk128 && key.b_blocks == Blocks::blk128) return false;
  if (!call.device || call.device->major != 9 || cublasLtGetVersion() < 120900) return false;
  return key.scales16 && key.n % 8 == 0 && (key.a_blocks != Blocks::vec128 || key.m % 8 == 0);
}

// cuBLASLt's A is our b, its B our a.
void set_scale_pointers(const LtPlan& p, const void* a_scale_inv, const void* b_scale_inv) {
  check_lt(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &b_scale_inv, sizeof(b_scale_inv)), "set A_SCALE_POINTER");
  check_lt(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &a_scale_inv, sizeof(a_scale_inv)), "set B_SCALE_POINTER");
}

struct Fp8Operands {
  const void *a, *b, *a_scale_inv, *b_scale_inv;
  void* out;
};

// cuBLASLt's FP8 GEMM refuses scale factors off 16-byte boundaries, and a per-tensor factor sits at
// any 4-byte offset of its meta record: such a factor is copied (in stream order) into one of two
// aligned slots here first, a for our a, b for our b.
__device__ __align__(16) float g_scale_slots[8];

const void* aligned_scale(const OpCall& call, const void* p, Blocks blocks, int slot) {
  if (blocks != Blocks::tensor || lt_alignment(p) >= 16) return p;
  static float* slots = nullptr;
  if (!slots) check_cuda(cudaGetSymbolAddress(reinterpret_cast<void**>(&slots), g_scale_slots), "matmul_fp8: scale slots");
  float* to = slots + 4 * slot;
  check_cuda(cudaMemcpyAsync(to, p, sizeof(float), cudaMemcpyDeviceToDevice, call.stream), "matmul_fp8: align a scale factor");
  return to;
}

LtPlan make_plan(const OpCall& call, const Fp8PlanKey& key, const Fp8Operands& x, bool accumulate, const void* residual) {
  LtPlan p;
  const bool fp8_cores = call.device && call.device->major * 10 + call.device->minor >= 89;
  const bool blocked = key.a_blocks != Blocks::tensor || key.b_blocks != Blocks::tensor;
  if (!fp8_cores || key.k % 16 != 0 || key.align_a < 16 || key.align_b < 16 || (blocked && !lt_takes_blocks(call, key))) {
    p.fallback = true;
    return p;
  }
  const auto handle = static_cast<cublasLtHandle_t>(call.cublaslt);
  check_lt(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
  const cublasOperation_t op_a = CUBLAS_OP_T, op_b = CUBLAS_OP_N;
  const int8_t fast_accum = 0;
  check_lt(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)), "set TRANSA");
  check_lt(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)), "set TRANSB");
  check_lt(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast_accum, sizeof(fast_accum)), "set FAST_ACCUM");
  if (blocked) {
    // cuBLASLt's A is our b; a cuBLASLt that does not know the modes refuses them: the fallback
    const int32_t mode_a = lt_scale_mode(key.b_blocks), mode_b = lt_scale_mode(key.a_blocks);
    if (cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode_a, sizeof(mode_a)) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode_b, sizeof(mode_b)) != CUBLAS_STATUS_SUCCESS) {
      cublasLtMatmulDescDestroy(p.desc);
      p.desc = nullptr;
      p.fallback = true;
      return p;
    }
  }
  set_scale_pointers(p, x.a_scale_inv, x.b_scale_inv);
  p.lt_a = lt_layout(lt_fp8_type(key.b_format), key.k, key.n);  // b [n, k]: column-major k x n
  p.lt_b = lt_layout(lt_fp8_type(key.a_format), key.k, key.m);  // a [m, k]: column-major k x m
  p.lt_out = lt_layout(key.out_dtype == DType::bf16 ? CUDA_R_16BF : CUDA_R_32F, key.n, key.m);
  const auto candidates = lt_candidates(call, p, {key.align_a, key.align_b, key.align_out, key.align_c}, key.autotune);
  if (candidates.empty()) {
    p.fallback = true;
    return p;
  }
  const size_t out_bytes = static_cast<size_t>(key.m * key.n) * dtype_bytes(key.out_dtype);
  p.algo = lt_fastest(call, candidates, x.out, out_bytes, accumulate, residual, [&](const cublasLtMatmulAlgo_t& algo, const float* beta, const void* c, void* d) {
    const float alpha = 1.0f;
    return cublasLtMatmul(handle, p.desc, &alpha, x.b, p.lt_a, x.a, p.lt_b, beta, c, p.lt_out, d, p.lt_out, &algo, call.cublaslt_workspace,
                          call.cublaslt_workspace_bytes, call.stream);
  });
  return p;
}

// out (+)= the product, or with `residual` out = residual + the product.
void run_fp8_gemm(const OpCall& call, const void* residual) {
  const Arg& out = call.arg("out"_arg);
  const Blocks a_blocks = blocks_attr(call, "aBlocks"_attr), b_blocks = blocks_attr(call, "bBlocks"_attr);
  const Fp8Operands x{call.arg("a"_arg).ptr, call.arg("b"_arg).ptr, aligned_scale(call, call.arg("aScaleInv"_arg).ptr, a_blocks, 0),
                      aligned_scale(call, call.arg("bScaleInv"_arg).ptr, b_blocks, 1), out.ptr};
  // The TypeScript side has checked the dtypes: out in the compute dtype or (outF32) f32, the
  // residual in out's.
  const DType out_dtype = residual ? float_dtype_of(call, {"out"_arg, "residual"_arg}) : call.float_dtype("out"_arg, {DType::f32, DType::bf16});
  const bool accumulate = !residual && call.flag("accumulate"_attr);
  const void* c = residual ? residual : out.ptr;  // GEMM's C: read when beta = 1
  const Fp8PlanKey key{fp8_format(call, "aFormat"_attr),
                       fp8_format(call, "bFormat"_attr),
                       a_blocks,
                       b_blocks,
                       out_dtype,
                       call.i64("m"_attr),
                       call.i64("n"_attr),
                       call.i64("k"_attr),
                       lt_alignment(x.a),
                       lt_alignment(x.b),
                       lt_alignment(out.ptr),
                       lt_alignment(c),
                       lt_alignment(x.a_scale_inv) >= 16 && lt_alignment(x.b_scale_inv) >= 16,
                       call.settings.gemm_autotune};
  // One device and one handle per process, and the JavaScript side calls from one thread.
  static std::map<Fp8PlanKey, LtPlan> plans;
  auto it = plans.find(key);
  if (it == plans.end()) it = plans.emplace(key, make_plan(call, key, x, accumulate, residual)).first;
  const LtPlan& p = it->second;
  if (p.fallback) {
    with_fp8(key.a_format, [&](auto fa) {
      with_fp8(key.b_format, [&](auto fb) {
        with_float_type(key.out_dtype, [&](auto out_tag) {
          using TO = typename decltype(out_tag)::type;
          const dim3 grid(static_cast<unsigned>((key.n + 255) / 256), static_cast<unsigned>(std::min<int64_t>(key.m, 65535)));
          check_cuda(launch_kernel(matmul_fp8_fallback_kernel<decltype(fa)::value, decltype(fb)::value, TO>, grid, 256, 0, call.stream,
                                   static_cast<const uint8_t*>(x.a), static_cast<const uint8_t*>(x.b),
                                   operand_scales(x.a_scale_inv, key.a_blocks, key.m, key.k), operand_scales(x.b_scale_inv, key.b_blocks, key.n, key.k),
                                   (accumulate || residual) ? static_cast<const TO*>(c) : nullptr, static_cast<TO*>(out.ptr), key.m, key.n, key.k),
                     "matmul_fp8_fallback_kernel");
        });
      });
    });
    return;
  }
  set_scale_pointers(p, x.a_scale_inv, x.b_scale_inv);
  const float alpha = 1.0f, beta = (accumulate || residual) ? 1.0f : 0.0f;
  check_lt(cublasLtMatmul(static_cast<cublasLtHandle_t>(call.cublaslt), p.desc, &alpha, x.b, p.lt_a, x.a, p.lt_b, &beta, c, p.lt_out, out.ptr, p.lt_out,
                          &p.algo, call.cublaslt_workspace, call.cublaslt_workspace_bytes, call.stream),
           "cublasLtMatmul");
}

}  // namespace
}  // namespace mdlm

MDLM_OP(matmul_fp8) { mdlm::run_fp8_gemm(call, nullptr); }

MDLM_OP(matmul_fp8_add) { mdlm::run_fp8_gemm(call, call.arg("residual"_arg).ptr); }
