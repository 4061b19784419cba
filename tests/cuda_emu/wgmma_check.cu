// Checks cuda/ptx.cuh (the swizzled tile layout, the descriptors, the accumulator and A-fragment
// layouts) on every wgmma form the attention kernels use, against a float64 product: on the GPU
// it checks our understanding of the hardware, under the emulator it checks the emulator's model.
// The two passing together are what lets tests/cuda_emu/attention_check.cc stand in for the GPU.
//
//   GPU (sm_90):  nvcc -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Icuda tests/cuda_emu/wgmma_check.cu -o /tmp/wgmma_check && /tmp/wgmma_check
//   emulator:     g++ -std=c++17 -O2 -x c++ -DWARP_EMULATOR -I/usr/local/cuda/include -Itests/cuda_emu \
//                     tests/cuda_emu/wgmma_check.cu -L/usr/local/cuda/lib64 -lcudart -o /tmp/wgmma_check_emu && /tmp/wgmma_check_emu
//
// Cases (M = 64 always):
//   kk   D = A·Bᵀ, A [64×128] and B [64×128] K-major (two slabs: the k-step crosses into slab 1), n64
//   rs   D = A·B, A [64×64] in registers, B [64 k × 128 n] MN-major (n128 spans two slabs via LBO)
//   mm   D = Aᵀ·B[:, 64..128), A [128 k × 64 m] and B [128 k × 128 n] both MN-major, n64 from slab 1
//   st   D = A·Bᵀ as kk, with A [64×64] written to its tile from A fragments by store_fragment
//        (stmatrix, as bwd_store_dst stores dSᵀ), B [64×64] K-major
//   tma  D = A·Bᵀ as kk, with A's tile loaded by TMA (encode_head_rows, tile_load_4d, an
//        mbarrier's expect_tx) from tokens 8..71 of head 2 of batch 1 of a [2][40][3][120]
//        tensor: tokens ≥ 40 and columns ≥ 120 must land as zeros
//   mc   the tma case in a cluster of two blocks: each block's thread 0 loads 32 of A's 64 rows
//        by multicast TMA (tile_load_4d_multicast) into both blocks, each block's mbarrier
//        announcing all 64 rows; each block computes D, arrives on the other's mbarrier
//        (mbar_arrive_cluster) and waits for the other's arrival before it exits; both D checked
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "../../cuda/ptx.cuh"

#ifdef WARP_EMULATOR
#define SMEM_BASE() reinterpret_cast<unsigned char*>(::emu::smem_base())
__device__ inline uint32_t shared_address(const void* p) { return ::emu::smem_addr(p); }
#else
#define SMEM_BASE() smem_raw
extern __shared__ __align__(1024) unsigned char smem_raw[];
__device__ inline uint32_t shared_address(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }
#endif

using bf16 = __nv_bfloat16;
using namespace mdlm::wg;

struct Args {
  TileMap a_map;  // tma and mc: A's tensor (boxes of 64 rows, mc 32)
  const bf16* a;  // case inputs, row-major as named in the header
  const bf16* b;
  float* d;       // [64][n] outputs
  int which;
};

constexpr int kTmaT = 40, kTmaHeads = 3, kTmaD = 120, kTmaToken = 8;  // the tma case's tensor and box

// Copies a row-major [rows][cols] matrix into the swizzled tile at `tile`.
__device__ void fill(unsigned char* tile, const bf16* g, int rows, int cols) {
  for (int i = threadIdx.x; i < rows * cols; i += blockDim.x) {
    const int r = i / cols, c = i % cols;
    *reinterpret_cast<bf16*>(tile + sw128_offset(rows, r, c)) = g[i];
  }
}

template <int N>
__device__ void store(float* out, const float (&d)[N / 2]) {
  const int w = threadIdx.x / 32, l = threadIdx.x % 32, g = l >> 2, t = l & 3;
  for (int j = 0; j < N / 8; ++j)
    for (int h = 0; h < 2; ++h)
      for (int e = 0; e < 2; ++e) out[(16 * w + g + 8 * h) * N + 8 * j + 2 * t + e] = d[4 * j + 2 * h + e];
}

// The A fragment of k16 step kk of a row-major [64][K] matrix (the register form's layout).
__device__ void a_fragment(uint32_t (&a)[4], const bf16* g, int K, int kk) {
  const int w = threadIdx.x / 32, l = threadIdx.x % 32, r = 16 * w + (l >> 2), c = 16 * kk + 2 * (l & 3);
  auto pair = [&](int row, int col) {
    const uint32_t lo = *reinterpret_cast<const uint16_t*>(g + row * K + col);
    const uint32_t hi = *reinterpret_cast<const uint16_t*>(g + row * K + col + 1);
    return lo | (hi << 16);
  };
  a[0] = pair(r, c), a[1] = pair(r + 8, c), a[2] = pair(r, c + 8), a[3] = pair(r + 8, c + 8);
}

__global__ void check_kernel(const __grid_constant__ Args p) {
  unsigned char* smem = SMEM_BASE();
  unsigned char* ta = smem;              // A tile (up to 16 KB)
  unsigned char* tb = smem + 16 * 1024;  // B tile (up to 32 KB)
  const uint32_t sa = shared_address(ta), sb = shared_address(tb), bar = shared_address(smem + 48 * 1024), done = bar + 8;
  const uint32_t rank = p.which == 5 ? cluster_ctarank() : 0;
  if (p.which == 5) {  // mc: this block's 32 rows of A (both slabs) to both blocks
    fill(tb, p.b, 64, 128);
    if (threadIdx.x == 0) {
      mbar_init(bar, 1);
      mbar_init(done, 1);
      fence_mbarrier_init();
    }
    cluster_sync();
    if (threadIdx.x == 0) {
      mbar_arrive_expect_tx(bar, 64 * 128 * 2);
      for (int c = 0; c < 2; ++c) tile_load_4d_multicast(sa + c * 64 * 128 + rank * 32 * 128, p.a_map, 64 * c, 2, kTmaToken + 32 * rank, 1, bar, 3);
    }
    mbar_wait(bar, 0);
  } else if (p.which == 0 || p.which == 4) {  // kk, tma
    fill(tb, p.b, 64, 128);
    if (p.which == 0) {
      fill(ta, p.a, 64, 128);
    } else {
      if (threadIdx.x == 0) {
        mbar_init(bar, 1);
        fence_mbarrier_init();
      }
      __syncthreads();
      if (threadIdx.x == 0) {
        mbar_arrive_expect_tx(bar, 64 * 128 * 2);
        for (int c = 0; c < 2; ++c) tile_load_4d(sa + c * 64 * 128, p.a_map, 64 * c, 2, kTmaToken, 1, bar);
      }
      mbar_wait(bar, 0);
    }
  } else if (p.which == 1) {  // rs
    fill(tb, p.b, 64, 128);
  } else if (p.which == 2) {  // mm
    fill(ta, p.a, 128, 64);
    fill(tb, p.b, 128, 128);
  } else {  // st: warp w's rows 16w.. of A, a k16 step's four fragment registers one stmatrix
    fill(tb, p.b, 64, 64);
    for (int kk = 0; kk < 4; ++kk) {
      uint32_t a[4];
      a_fragment(a, p.a, 64, kk);
      store_fragment(sa, 64, 16 * (threadIdx.x / 32), kk, a);
    }
  }
  fence_proxy_async();
  __syncthreads();
  wgmma_fence();
  if (p.which == 0 || p.which == 4 || p.which == 5) {
    float d[32];
    for (int kk = 0; kk < 8; ++kk) wgmma_ss<64, 0, 0>(d, desc_k_major(sa, 64, 0, kk), desc_k_major(sb, 64, 0, kk), kk > 0);
    wgmma_commit();
    wgmma_wait<0>();
    store<64>(p.d + rank * 64 * 64, d);
    if (p.which == 5) {  // the other block's multicast into this one has landed: it may exit once this one has read
      if (threadIdx.x == 0) mbar_arrive_cluster(done, rank ^ 1u);
      mbar_wait(done, 0);
    }
  } else if (p.which == 1) {
    float d[64];
    for (int kk = 0; kk < 4; ++kk) {
      uint32_t a[4];
      a_fragment(a, p.a, 64, kk);
      wgmma_fence();
      wgmma_rs<128, 1>(d, a, desc_mn_major(sb, 64, 0, kk), kk > 0);
    }
    wgmma_commit();
    wgmma_wait<0>();
    store<128>(p.d, d);
  } else if (p.which == 2) {
    float d[32];
    for (int kk = 0; kk < 8; ++kk) wgmma_ss<64, 1, 1>(d, desc_mn_major(sa, 128, 0, kk), desc_mn_major(sb, 128, 64, kk), kk > 0);
    wgmma_commit();
    wgmma_wait<0>();
    store<64>(p.d, d);
  } else {
    float d[32];
    for (int kk = 0; kk < 4; ++kk) wgmma_ss<64, 0, 0>(d, desc_k_major(sa, 64, 0, kk), desc_k_major(sb, 64, 0, kk), kk > 0);
    wgmma_commit();
    wgmma_wait<0>();
    store<64>(p.d, d);
  }
}

namespace {

struct Case {
  const char* name;
  int a_rows, a_cols, b_rows, b_cols, n;
  // D[m][j] = Σ_k A(m, k) B(k, j) in terms of the stored row-major arrays
  double (*a_at)(const std::vector<float>&, int m, int k);
  double (*b_at)(const std::vector<float>&, int k, int j);
  int K;
  int blocks = 1;  // a cluster of this many, each computing D
};

double rowmajor_a(const std::vector<float>& a, int m, int k) { return a[m * 128 + k]; }
double rowmajor_bt(const std::vector<float>& b, int k, int j) { return b[j * 128 + k]; }
double a64(const std::vector<float>& a, int m, int k) { return a[m * 64 + k]; }
double b_kn128(const std::vector<float>& b, int k, int j) { return b[k * 128 + j]; }
double at_km64(const std::vector<float>& a, int m, int k) { return a[k * 64 + m]; }
double b_kn128_hi(const std::vector<float>& b, int k, int j) { return b[k * 128 + 64 + j]; }
double b_nk64(const std::vector<float>& b, int k, int j) { return b[j * 64 + k]; }
double a_head_rows(const std::vector<float>& a, int m, int k) {
  const int t = kTmaToken + m;
  return t < kTmaT && k < kTmaD ? a[((1 * kTmaT + t) * kTmaHeads + 2) * kTmaD + k] : 0.0;
}

}  // namespace

int main() {
  const Case cases[] = {
      {"kk", 64, 128, 64, 128, 64, rowmajor_a, rowmajor_bt, 128},
      {"rs", 64, 64, 64, 128, 128, a64, b_kn128, 64},
      {"mm", 128, 64, 128, 128, 64, at_km64, b_kn128_hi, 128},
      {"st", 64, 64, 64, 64, 64, a64, b_nk64, 64},
      {"tma", 2 * kTmaT * kTmaHeads, kTmaD, 64, 128, 64, a_head_rows, rowmajor_bt, 128},
      {"mc", 2 * kTmaT * kTmaHeads, kTmaD, 64, 128, 64, a_head_rows, rowmajor_bt, 128, 2},
  };
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  int failed = 0;
  for (int which = 0; which < 6; ++which) {
    const Case& c = cases[which];
    std::vector<bf16> a(c.a_rows * c.a_cols), b(c.b_rows * c.b_cols);
    std::vector<float> af(a.size()), bfv(b.size()), d(c.blocks * 64 * c.n, NAN);
    for (size_t i = 0; i < a.size(); ++i) a[i] = __float2bfloat16(u(rng)), af[i] = __bfloat162float(a[i]);
    for (size_t i = 0; i < b.size(); ++i) b[i] = __float2bfloat16(u(rng)), bfv[i] = __bfloat162float(b[i]);
    Args args{};
    args.which = which;
    const size_t smem = 48 * 1024 + 1024;
#ifdef WARP_EMULATOR
    args.a = a.data(), args.b = b.data(), args.d = d.data();
    if (which >= 4) encode_head_rows(args.a_map, args.a, 2, kTmaT, kTmaHeads, kTmaD, 64 / c.blocks);
    ::emu::launch_clusters(c.blocks, check_kernel, dim3(c.blocks), 128, smem, args);
#else
    bf16 *da, *db;
    float* dd;
    cudaMalloc(&da, a.size() * 2), cudaMalloc(&db, b.size() * 2), cudaMalloc(&dd, d.size() * 4);
    cudaMemcpy(da, a.data(), a.size() * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(db, b.data(), b.size() * 2, cudaMemcpyHostToDevice);
    cudaMemset(dd, 0xff, d.size() * 4);
    args.a = da, args.b = db, args.d = dd;
    if (which >= 4) {
      if (const char* err = encode_head_rows(args.a_map, da, 2, kTmaT, kTmaHeads, kTmaD, 64 / c.blocks)) {
        std::printf("%-5s %s\n", c.name, err);
        return 2;
      }
    }
    cudaFuncSetAttribute(check_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    cudaLaunchAttribute cluster{};
    cluster.id = cudaLaunchAttributeClusterDimension;
    cluster.val.clusterDim.x = c.blocks, cluster.val.clusterDim.y = 1, cluster.val.clusterDim.z = 1;
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(c.blocks), config.blockDim = dim3(128), config.dynamicSmemBytes = smem, config.attrs = &cluster, config.numAttrs = 1;
    cudaError_t err = cudaLaunchKernelEx(&config, check_kernel, args);
    if (err == cudaSuccess) err = cudaDeviceSynchronize();
    if (err != cudaSuccess) {
      std::printf("%-5s CUDA error: %s\n", c.name, cudaGetErrorString(err));
      return 2;
    }
    cudaMemcpy(d.data(), dd, d.size() * 4, cudaMemcpyDeviceToHost);
    cudaFree(da), cudaFree(db), cudaFree(dd);
#endif
    double num = 0, den = 0;
    int shown = 0;
    for (int blk = 0; blk < c.blocks; ++blk)
      for (int m = 0; m < 64; ++m)
        for (int j = 0; j < c.n; ++j) {
          double ref = 0;
          for (int k = 0; k < c.K; ++k) ref += c.a_at(af, m, k) * c.b_at(bfv, k, j);
          const double got = d[(blk * 64 + m) * c.n + j], e = got - ref;
          num += e * e, den += ref * ref;
          if (!(std::fabs(e) <= 1e-3 * (1 + std::fabs(ref))) && shown < 4) {
            std::printf("  %s block %d D[%d][%d] = %.5f, expected %.5f\n", c.name, blk, m, j, got, ref);
            ++shown;
          }
        }
    const double rel = std::sqrt(num / den);
    const bool ok = rel < 1e-5;
    failed += !ok;
    std::printf("%-5s rel err %.2e  %s\n", c.name, rel, ok ? "ok" : "FAIL");
  }
  return failed ? 1 : 0;
}
