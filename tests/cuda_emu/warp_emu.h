// A CPU emulator for the CUDA features the attention kernels use, so cuda/attention/attention.cu can be run
// and checked against a float64 reference on a machine without a GPU (tests/cuda_emu/attention_check.cc).
//
// Every CUDA thread of a block is a coroutine on a stack of its own (switched by a few
// instructions on x86-64, by swapcontext elsewhere: see Context);
// the scheduler resumes them round-robin, or in the orders EMU_SCHEDULE picks (skewed; random with
// one slow thread: see Schedule). A thread blocked at a barrier, a collective or an mbarrier wait
// is passed over until what it waits on changes (yield_until_changed): resuming it sooner would
// only see it yield again.
// __syncthreads and every warp-collective operation (shuffles, votes, redux, ldmatrix, mma) block
// the calling thread until all participants have arrived, then compute the result from all of
// their inputs exactly as the PTX ISA defines it (fragment layouts of mma.m16n8k16 and ldmatrix).
// wgmma.mma_async is a collective of the 128 threads of a warpgroup, computed when the last one
// arrives; its shared-memory operands are read through the matrix descriptors (128B swizzle, K- or
// MN-major, cuda/ptx.cuh). The hardware reads them asynchronously, any time until the
// wait_group that retires the commit group: the emulator records what it read and fails if any
// of it changed before that wait (the fences are no-ops).
// cp.async copies are queued per thread and land at that thread's cp.async.wait_group, so a read
// of a tile before its wait sees stale data, as it could on the GPU. TMA tile loads
// (cp.async.bulk.tensor) are queued on their mbarrier and land when a thread waits on it with its
// arrivals all in, the latest the hardware could; TMA tile stores land at the issuing thread's
// cp.async.bulk.wait_group.read that retires them (a thread may not exit with any pending);
// EMU_CP_ASYNC=eager lands every kind of copy at issue, the earliest. mbarriers count arrivals and transaction bytes (expect_tx, complete_tx).
// Shared memory is a byte array per block; "shared addresses" are offsets into it. Deadlocks and
// warp divergence at a collective (lanes calling different collectives) abort with a message;
// at a deadlock it names what each run of blocked threads waits on.
// Thread block clusters (launch_clusters): the blocks of a cluster run under one scheduler, with
// the cluster barrier, mbarrier arrivals on another block's mbarrier (mapa), and multicast TMA
// loads into several blocks' shared memory, each crediting its own block's mbarrier; an arrival
// or a load that reaches a block whose threads have all exited (its shared memory gone) aborts.
//
// Not a performance model, and not a memory-model checker beyond the above.
#pragma once

#include "emu_wgmma.h"

// ---- the CUDA names the kernels use ----

#undef __launch_bounds__
#define __launch_bounds__(...)
#undef __global__
#define __global__
#undef __grid_constant__
#define __grid_constant__
#undef __device__
#define __device__
// Static shared memory (the SIMT kernels' block reductions): one variable for the whole grid,
// which is the block's own, as blocks run one at a time (launch); cluster kernels have none.
#undef __shared__
#define __shared__ static

#define threadIdx (::emu::thread_ptr()->tid)
#define blockIdx (::emu::block_ptr()->bid)
#define gridDim (::emu::block_ptr()->grid)
#define blockDim (::emu::block_ptr()->block)

inline void __syncthreads() { emu::syncthreads(); }
inline void __syncwarp(unsigned = 0xffffffffu) { emu::syncwarp(); }
template <typename T>
inline T __shfl_xor_sync(unsigned, T v, int m) { return emu::shfl_xor(v, m); }
template <typename T>
inline T __shfl_sync(unsigned, T v, int s) { return emu::shfl(v, s); }
template <typename T>
inline T __shfl_up_sync(unsigned, T v, int d) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  return emu::shfl(v, lane >= d ? lane - d : lane);
}
inline int __reduce_min_sync(unsigned, int v) { return emu::reduce_min(v); }
inline int __reduce_max_sync(unsigned, int v) { return emu::reduce_max(v); }
inline int __any_sync(unsigned, int p) { return emu::any(p); }
template <typename T>
inline T __ldg(const T* p) { return *p; }
inline float __log2f(float x) { return std::log2(x); }
inline float __expf(float x) { return std::exp(x); }
inline void __sincosf(float x, float* s, float* c) { *s = std::sin(x), *c = std::cos(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __int_as_float(int i) {
  float f;
  std::memcpy(&f, &i, 4);
  return f;
}
template <typename T>
inline T __ldcs(const T* p) { return *p; }
template <typename T>
inline void __stcs(T* p, T v) { *p = v; }
inline float __uint_as_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t __float_as_uint(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
// Threads switch only at collectives and barriers, so a read-modify-write is atomic as written.
inline unsigned int atomicCAS(unsigned int* address, unsigned int compare, unsigned int value) {
  const unsigned int old = *address;
  if (old == compare) *address = value;
  return old;
}
using std::max;
using std::min;
