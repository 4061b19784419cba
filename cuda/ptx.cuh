// The PTX the tensor-core kernels use, for the attention kernels (cuda/attention/) and the Hopper
// GEMM (cuda/gemm/gemm_ws.cuh) alike, each instruction wrapped once, with its CPU model under the
// warp emulator (WARP_EMULATOR: tests/cuda_emu/warp_emu.h):
//   sm_80 and newer: shared addresses, cp.async, ldmatrix, mma.sync m16n8k16 (bf16 -> f32), bf16
//     packing, and a kernel's dynamic shared memory (DYNAMIC_SMEM);
//   Hopper (sm_90a, namespace wg): warpgroup MMA (wgmma), TMA, mbarriers, named and cluster
//     barriers, stmatrix, setmaxnreg.
//
// Hopper warpgroup MMA: 128-byte-swizzled shared-memory tiles, their matrix descriptors, and the
// wgmma.mma_async forms the kernels use (bf16 in, f32 accumulate, k16: m64n64, m64n128 and
// m64n256 with A from shared memory (the last for the GEMM), m64n64 and m64n128 with A from
// registers).
//
// Tile layout (sw128_offset): a [rows][cols] bf16 tile is stored as cols/64 slabs of [rows][64],
// each row 128 bytes, the 16-byte chunk c of row r at chunk c ^ (r mod 8) (the hardware's 128B
// swizzle on address bits [4,7) ^ [7,10)), every slab 1024-byte aligned. One such tile serves as
// either operand kind:
//   K-major (the contraction runs along the columns): rows are M or N; a k16 step advances the
//     start address 32 bytes within a slab row (4 steps a slab, then the next slab); SBO = 1024
//     bytes between groups of 8 rows.
//   MN-major (the contraction runs down the rows, "transposed"): a k16 step advances 16 rows
//     (2048 bytes); SBO = 1024 bytes between groups of 8 rows; LBO = the slab stride, between
//     64-column groups of M or N.
// (CUTLASS's canonical GMMA layouts, cute/atom/mma_traits_sm90_gmma.hpp, in these terms.)
//
// Accumulator fragment of an m64nN tile (f32, N/2 registers a thread): warp w of the warpgroup
// owns rows 16w.., lane l (g = l >> 2, t = l & 3) holds d[4j + 2h + e] = D[16w + g + 8h][8j + 2t + e].
// The A fragment of the register form (4 × bf16x2 a k16 step) is mma.m16n8k16's per warp:
// {(g, 2t..), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..)}, so an accumulator converts to an A
// operand in place (as FlashAttention does with P).
//
// The instructions are asynchronous: wgmma_fence() before the first one that reads registers
// written since, wgmma_commit() closes a group, wgmma_wait<N>() waits until at most N groups are
// pending; shared memory written with ordinary stores (or cp.async) needs fence_proxy_async()
// and a barrier before a wgmma reads it. tests/cuda_emu/warp_emu.h models all of this (computing at
// issue, and failing if shared memory a group read changes before the wait that retires it), and
// tests/cuda_emu/wgmma_check.cu checks that model against the hardware.
//
// Tiles come in by TMA (tile_load_4d): one thread asks for a box of a tensor map (encode_head_rows)
// and the copy engine writes it in this same 128B-swizzled layout, crediting its bytes to an
// mbarrier that the thread announced them on (mbar_arrive_expect_tx); the readers wait on that
// mbarrier. The swizzle is the hardware's, on address bits, so a tile must be 1024-byte aligned.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#ifdef WARP_EMULATOR
#include "warp_emu.h"  // tests/cuda_emu: the CPU warp emulator
#else
#include <cuda.h>          // CUtensorMap
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled
#include <cuda_runtime.h>
#endif

// Dynamic shared memory of a kernel, as an array of T named `name`.
#ifdef WARP_EMULATOR
#define DYNAMIC_SMEM(T, name) T* name = reinterpret_cast<T*>(::emu::smem_base())
#else
#define DYNAMIC_SMEM(T, name) extern __shared__ __align__(128) T name[]
#endif

namespace mdlm {

// ---------------------------------------------------------------------------------------------
// sm_80+ instructions
// ---------------------------------------------------------------------------------------------

#ifdef WARP_EMULATOR
// CPU emulation of the same instructions (tests/cuda_emu/warp_emu.h): checks the kernels'
// indexing and fragment layouts without a GPU.
__device__ __forceinline__ uint32_t smem_u32(const void* p) { return ::emu::smem_addr(p); }
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool pred) { ::emu::cp_async(dst, src, 16, pred ? 16 : 0); }
__device__ __forceinline__ void cp_async4(uint32_t dst, const void* src, bool pred) { ::emu::cp_async(dst, src, 4, pred ? 4 : 0); }
__device__ __forceinline__ void cp_async_commit() {}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  static_assert(N == 0, "the emulation lands every copy at wait_group 0");
  ::emu::cp_async_wait_all();
}
__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  uint32_t r[4];
  ::emu::ldmatrix_x4(addr, r, false);
  r0 = r[0], r1 = r[1], r2 = r[2], r3 = r[3];
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  uint32_t r[4];
  ::emu::ldmatrix_x4(addr, r, true);
  r0 = r[0], r1 = r[1], r2 = r[2], r3 = r[3];
}
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) { ::emu::mma_m16n8k16(c, a, b0, b1); }
#else
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, bypassing L1; when !pred nothing is read and the 16 bytes are zeroed.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool pred) {
  const int n = pred ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}

// 4 bytes global -> shared; zero when !pred.
__device__ __forceinline__ void cp_async4(uint32_t dst, const void* src, bool pred) {
  const int n = pred ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Four 8x8 b16 matrices; lane l gives the address of row (l & 7) of matrix (l >> 3); register i
// receives matrix i: lane l holds its row l >> 2, columns 2(l & 3) and 2(l & 3) + 1.
__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}

// The same, each matrix transposed: lane l holds column l >> 2, rows 2(l & 3) and 2(l & 3) + 1.
__device__ __forceinline__ void ldsm_x4_t(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}

// c[16x8] += a[16x16] · b[16x8], bf16 inputs, f32 accumulation. Fragments (g = lane >> 2,
// t = lane & 3): a = {(g, 2t..), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..)}, b = {(k 2t.., n g),
// (k 2t+8.., n g)}, c = {(g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1)}.
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

#endif  // WARP_EMULATOR

// Two floats to a bf16x2 register, round to nearest even; `lo` in the low half (lower column).
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

}  // namespace mdlm

namespace mdlm {
namespace wg {

// Byte offset of element (r, c) of a [rows][cols] bf16 tile in the 128B-swizzled slab layout.
__host__ __device__ __forceinline__ uint32_t sw128_offset(int rows, int r, int c) {
  return (uint32_t)(c >> 6) * rows * 128 + r * 128 + ((((c >> 3) & 7) ^ (r & 7)) << 4) + (c & 7) * 2;
}

// Matrix descriptor: start address, leading and stride byte offsets, 128B swizzle.
__host__ __device__ __forceinline__ uint64_t sw128_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return (uint64_t)((addr & 0x3ffff) >> 4) | ((uint64_t)((lbo >> 4) & 0x3fff) << 16) |
         ((uint64_t)((sbo >> 4) & 0x3fff) << 32) | (1ull << 62);
}

// The descriptor with its start address moved by `bytes` (a multiple of 16): one add to the low
// word. Shared addresses stay below 256 KB, so the 14-bit address field never carries.
__host__ __device__ __forceinline__ uint64_t desc_advance(uint64_t desc, uint32_t bytes) {
  return (desc & 0xffffffff00000000ull) | (uint32_t)((uint32_t)desc + (bytes >> 4));
}

// Descriptor of k16 step `kk` of a tile at shared address `base` with `rows` rows, read K-major
// from row `row0` (a multiple of 8), or MN-major from column `col0` (a multiple of 8). Built once
// for the tile and advanced a constant for each step (kk is unrolled in the kernels): rebuilding
// it from the address took five instructions a wgmma, on the critical path of its issue.
__host__ __device__ __forceinline__ uint64_t desc_k_major(uint32_t base, int rows, int row0, int kk) {
  return desc_advance(sw128_desc(base + row0 * 128, 16, 1024), (kk >> 2) * rows * 128 + (kk & 3) * 32);
}
__host__ __device__ __forceinline__ uint64_t desc_mn_major(uint32_t base, int rows, int col0, int kk) {
  return desc_advance(sw128_desc(base + (col0 >> 6) * rows * 128 + (col0 & 63) * 2, rows * 128, 1024), kk * 2048);
}

// This thread's warpgroup, shuffled from lane 0: the compiler then knows it is the same across
// the warp and keeps what derives from it (tile addresses, descriptors) in uniform registers, as
// CUTLASS's canonical_warp_group_idx does; from threadIdx.x it built every wgmma's descriptor in
// ordinary registers and moved it over (R2UR).
__device__ __forceinline__ int warpgroup_index() { return __shfl_sync(0xffffffffu, (int)(threadIdx.x >> 7), 0); }

// Named barriers and mbarriers (the warp-specialised pipeline's synchronisation).
#ifdef WARP_EMULATOR
__device__ __forceinline__ void bar_sync(int id, int count) { ::emu::named_barrier(id, count, false); }
__device__ __forceinline__ void bar_arrive(int id, int count) { ::emu::named_barrier(id, count, true); }
__device__ __forceinline__ bool bar_any(int id, int count, bool pred) { return ::emu::named_barrier(id, count, false, pred); }
__device__ __forceinline__ void mbar_init(uint32_t addr, int count) { ::emu::mbarrier_init(addr, count); }
__device__ __forceinline__ void mbar_arrive(uint32_t addr) { ::emu::mbarrier_arrive(addr); }
__device__ __forceinline__ void mbar_wait(uint32_t addr, uint32_t parity) { ::emu::mbarrier_wait(addr, parity); }
__device__ __forceinline__ void cp_async_mbar_arrive(uint32_t addr) { ::emu::cp_async_mbarrier_arrive(addr); }
#else
__device__ __forceinline__ void bar_sync(int id, int count) { asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory"); }
__device__ __forceinline__ void bar_arrive(int id, int count) { asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory"); }
// bar.sync that also returns whether any of the `count` threads passed pred = true.
__device__ __forceinline__ bool bar_any(int id, int count, bool pred) {
  uint32_t any;
  asm volatile(
      "{\n .reg .pred p, q;\n setp.ne.u32 q, %1, 0;\n bar.red.or.pred p, %2, %3, q;\n selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(any)
      : "r"((uint32_t)pred), "r"(id), "r"(count)
      : "memory");
  return any != 0;
}
__device__ __forceinline__ void mbar_init(uint32_t addr, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(addr), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t addr) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(addr) : "memory");
}
// Until the phase of that parity has completed.
__device__ __forceinline__ void mbar_wait(uint32_t addr, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\nWAIT%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT%=;\n}\n" ::"r"(addr),
      "r"(parity)
      : "memory");
}
// An arrival on the mbarrier once this thread's earlier cp.async copies have landed.
__device__ __forceinline__ void cp_async_mbar_arrive(uint32_t addr) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(addr) : "memory");
}
#endif

// TMA tile loads (see the top of the file).
#ifdef WARP_EMULATOR
using TileMap = ::emu::TensorMap;
__device__ __forceinline__ void fence_mbarrier_init() {}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) { ::emu::mbarrier_arrive_expect_tx(bar, bytes); }
__device__ __forceinline__ void tile_load_4d(uint32_t dst, const TileMap& map, int c0, int c1, int c2, int c3, uint32_t bar) {
  ::emu::tile_load(dst, &map, {c0, c1, c2, c3, 0}, bar);
}
__device__ __forceinline__ void tile_store_4d(uint32_t src, const TileMap& map, int c0, int c1, int c2, int c3) {
  ::emu::tile_store(src, &map, {c0, c1, c2, c3, 0});
}
__device__ __forceinline__ void bulk_commit() { ::emu::bulk_commit(); }
template <int N>
__device__ __forceinline__ void bulk_wait_read() { ::emu::bulk_wait_read(N); }
// A hint to the memory system, with no effect on results: nothing to emulate.
__device__ __forceinline__ void tile_prefetch_l2_4d(const TileMap&, int, int, int, int) {}
__device__ __forceinline__ void tile_load_4d_multicast(uint32_t dst, const TileMap& map, int c0, int c1, int c2, int c3, uint32_t bar, uint16_t mask) {
  ::emu::tile_load_multicast(dst, &map, {c0, c1, c2, c3, 0}, bar, mask);
}
__device__ __forceinline__ uint32_t cluster_ctarank() { return ::emu::cluster_ctarank(); }
__device__ __forceinline__ void cluster_sync() { ::emu::cluster_sync(); }
__device__ __forceinline__ void mbar_arrive_cluster(uint32_t addr, uint32_t rank) { ::emu::mbarrier_arrive_cluster(addr, rank); }
#else
using TileMap = CUtensorMap;
// Makes the block's mbarrier inits visible to the copy engine (the async proxy) before a TMA
// load credits one; a __syncthreads() after it makes them visible to the other threads.
__device__ __forceinline__ void fence_mbarrier_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
// An arrival that first announces `bytes` of tile loads for the mbarrier's current phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// The box of `map` at coordinates (c0, c1, c2, c3) to shared address `dst`, its bytes credited to
// mbarrier `bar`. `map` must live in kernel parameter space (a __grid_constant__ parameter).
__device__ __forceinline__ void tile_load_4d(uint32_t dst, const TileMap& map, int c0, int c1, int c2, int c3, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(&map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
}
// The box of `map` at (c0, c1, c2, c3) from shared address `src` (the load's layout) to global
// memory, in this thread's current bulk group; elements out of bounds are not written. The
// writes to `src` must be made visible to the copy engine first (fence_proxy_async, then a
// barrier when other threads wrote them).
__device__ __forceinline__ void tile_store_4d(uint32_t src, const TileMap& map, int c0, int c1, int c2, int c3) {
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n" ::"l"(reinterpret_cast<uint64_t>(&map)), "r"(src),
               "r"(c0), "r"(c1), "r"(c2), "r"(c3)
               : "memory");
}
// The box of `map` at (c0, c1, c2, c3) brought into L2, for a tile_load_4d of it soon after.
__device__ __forceinline__ void tile_prefetch_l2_4d(const TileMap& map, int c0, int c1, int c2, int c3) {
  asm volatile("cp.async.bulk.prefetch.tensor.4d.L2.global.tile [%0, {%1, %2, %3, %4}];\n" ::"l"(reinterpret_cast<uint64_t>(&map)), "r"(c0), "r"(c1), "r"(c2),
               "r"(c3)
               : "memory");
}
// Closes this thread's bulk group; waits until at most N groups may still read their shared source.
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
// Thread block clusters (a kernel launched with cudaLaunchAttributeClusterDimension):
// tile_load_4d's box written to shared address `dst` of every block of the cluster whose rank's
// bit is set in `mask`, each block's mbarrier at `bar` credited with its bytes.
__device__ __forceinline__ void tile_load_4d_multicast(uint32_t dst, const TileMap& map, int c0, int c1, int c2, int c3, uint32_t bar, uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%2, %3, %4, %5}], [%6], %7;\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(&map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar), "h"(mask)
      : "memory");
}
// This block's rank in its cluster.
__device__ __forceinline__ uint32_t cluster_ctarank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
// Every thread of every block of the cluster meets here; the writes before (mbarrier inits) are
// seen by all after.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
// An arrival on the mbarrier at the same shared address in the cluster's block of rank `rank`
// (this block's own, too), with mbarrier.arrive's default release at CTA scope, as CUTLASS's
// ClusterBarrier::arrive (.release.cluster here makes a kernel in clusters far slower).
__device__ __forceinline__ void mbar_arrive_cluster(uint32_t addr, uint32_t rank) {
  asm volatile("{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\nmbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n" ::"r"(addr), "r"(rank)
               : "memory");
}
#endif

// Encodes `map` for tiles of a [B][T][heads][D] bf16 tensor at `base`: boxes of `rows` tokens × 64
// columns of one (batch, head), loaded at coordinates (column, head, token, batch) into a
// [rows][64] slab of the layout above; tokens ≥ T and columns ≥ D land as zeros. Returns an error
// message, or nullptr.
inline const char* encode_head_rows(TileMap& map, const void* base, int B, int T, int heads, int D, int rows) {
  if (reinterpret_cast<uintptr_t>(base) % 16 != 0 || D % 8 != 0) return "TMA tile map: the tensor must be 16-byte aligned, its head dim a multiple of 8";
  const uint64_t dims[4] = {(uint64_t)D, (uint64_t)heads, (uint64_t)T, (uint64_t)B};
  const uint64_t strides[4] = {0, (uint64_t)D * 2, (uint64_t)heads * D * 2, (uint64_t)T * heads * D * 2};  // bytes, dims 1..3
  const uint32_t box[4] = {64, 1, (uint32_t)rows, 1};
#ifdef WARP_EMULATOR
  map = TileMap{};
  map.base = base;
  map.rank = 4;
  for (int d = 0; d < 4; ++d) map.dims[d] = dims[d], map.strides[d] = strides[d], map.box[d] = box[d];
  return nullptr;
#else
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
#if CUDART_VERSION >= 12050
    const cudaError_t err = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found);
#else  // toolkits before 12.5 have only the unversioned query
    const cudaError_t err = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &fn, cudaEnableDefault, &found);
#endif
    return err == cudaSuccess && found == cudaDriverEntryPointSuccess ? reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn) : nullptr;
  }();
  if (!encode) return "TMA tile map: the driver has no cuTensorMapEncodeTiled (CUDA 12 or later needed)";
  const cuuint32_t unit[4] = {1, 1, 1, 1};
  const CUresult r = encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, const_cast<void*>(base), dims, strides + 1, box, unit,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? nullptr : "TMA tile map: cuTensorMapEncodeTiled rejected the tensor (shape, strides or box)";
#endif
}

// setmaxnreg: a warpgroup gives registers back (the producer) or takes more (the consumers).
template <int kRegs>
__device__ __forceinline__ void regs_dec() {
#ifndef WARP_EMULATOR
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#endif
}
template <int kRegs>
__device__ __forceinline__ void regs_inc() {
#ifndef WARP_EMULATOR
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#endif
}

#ifdef WARP_EMULATOR
__device__ __forceinline__ void wgmma_fence() {}
__device__ __forceinline__ void wgmma_commit() { ::emu::wgmma_commit(); }
template <int N>
__device__ __forceinline__ void wgmma_wait() { ::emu::wgmma_wait(N); }
__device__ __forceinline__ void fence_proxy_async() { ::emu::fence_proxy_async(); }
template <int N>
__device__ __forceinline__ void fence_operand(float (&)[N]) {}
template <int N, int kTransA, int kTransB>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], uint64_t a, uint64_t b, bool accumulate) {
  ::emu::wgmma(N, nullptr, a, b, kTransA, kTransB, accumulate, d);
}
template <int N, int kTransB>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t b, bool accumulate) {
  ::emu::wgmma(N, a, 0, b, false, kTransB, accumulate, d);
}
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, const uint32_t (&r)[4]) { ::emu::stmatrix_x4(addr, r); }
#else
// Four 8 × 8 bf16 matrices to shared memory: lane l gives the address of row (l & 7) of matrix
// l >> 3; register m holds matrix m's fragment in the accumulator / ldmatrix layout.
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]) : "memory");
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// Pins an accumulator's registers at this point of the program: the compiler neither moves their
// reads and writes across it nor copies them while a wgmma that writes them is in flight (which
// makes ptxas serialise every wgmma of the kernel, C7515).
template <int N>
__device__ __forceinline__ void fence_operand(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

namespace detail {
template <int kTransA, int kTransB>
__device__ __forceinline__ void wgmma_ss_n64(float (&d)[32], uint64_t a, uint64_t b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, %35, %36;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(a), "l"(b), "r"(int(accumulate)), "n"(kTransA), "n"(kTransB));
}

template <int kTransB>
__device__ __forceinline__ void wgmma_rs_n128(float (&d)[64], const uint32_t (&a)[4], uint64_t b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(int(accumulate)), "n"(kTransB));
}
template <int kTransA, int kTransB>
__device__ __forceinline__ void wgmma_ss_n128(float (&d)[64], uint64_t a, uint64_t b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, %67, %68;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(a), "l"(b), "r"(int(accumulate)), "n"(kTransA), "n"(kTransB));
}

template <int kTransA, int kTransB>
__device__ __forceinline__ void wgmma_ss_n256(float (&d)[128], uint64_t a, uint64_t b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, %131, %132;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(a), "l"(b), "r"(int(accumulate)), "n"(kTransA), "n"(kTransB));
}

template <int kTransB>
__device__ __forceinline__ void wgmma_rs_n64(float (&d)[32], const uint32_t (&a)[4], uint64_t b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(int(accumulate)), "n"(kTransB));
}

}  // namespace detail

// d[64×N] (+)= A·B, A and B from shared memory (kTrans = 1: MN-major).
template <int N, int kTransA, int kTransB>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], uint64_t a, uint64_t b, bool accumulate) {
  static_assert(N == 64 || N == 128 || N == 256, "wgmma_ss: the kernels use n64, n128 and n256 (add a form here for another N)");
  if constexpr (N == 64) detail::wgmma_ss_n64<kTransA, kTransB>(d, a, b, accumulate);
  else if constexpr (N == 128) detail::wgmma_ss_n128<kTransA, kTransB>(d, a, b, accumulate);
  else detail::wgmma_ss_n256<kTransA, kTransB>(d, a, b, accumulate);
}

// d[64×N] (+)= A·B, A from registers (the fragment above), B from shared memory.
template <int N, int kTransB>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t b, bool accumulate) {
  static_assert(N == 64 || N == 128, "wgmma_rs: the kernels use n64 and n128 (add a form here for another N)");
  if constexpr (N == 64) detail::wgmma_rs_n64<kTransB>(d, a, b, accumulate);
  else detail::wgmma_rs_n128<kTransB>(d, a, b, accumulate);
}
#endif  // WARP_EMULATOR

// A warp's A fragment of k16 step kk (rows row0..row0 + 16 of a [rows][cols] tile: the
// accumulator layout, register m holding rows + 8·(m & 1), columns 16·kk + 8·(m >> 1)..) stored
// into the swizzled tile at shared address `tile` by one stmatrix.
__device__ __forceinline__ void store_fragment(uint32_t tile, int rows, int row0, int kk, const uint32_t (&r)[4]) {
  const int lane = threadIdx.x & 31, m = lane >> 3;
  stmatrix_x4(tile + sw128_offset(rows, row0 + (lane & 7) + 8 * (m & 1), 16 * kk + 8 * (m >> 1)), r);
}

}  // namespace wg
}  // namespace mdlm
