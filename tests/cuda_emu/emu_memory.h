// The warp emulator's shared memory and copies (tests/cuda_emu/warp_emu.h): cp.async, TMA tile
// loads and stores (multicast too), ldmatrix and stmatrix, and mma.sync m16n8k16.
#pragma once

#include "emu_sync.h"

namespace emu {

// ---- shared memory, cp.async, ldmatrix, mma ----

inline unsigned char* smem_base() { return block_ptr()->smem.data(); }

inline uint32_t smem_addr(const void* p) {
  const unsigned char* c = static_cast<const unsigned char*>(p);
  const unsigned char* base = smem_base();
  if (c < base || c >= base + block_ptr()->smem.size()) fail("address outside shared memory");
  return static_cast<uint32_t>(c - base);
}

inline void check_smem(uint32_t a, size_t n) {
  if (a + n > block_ptr()->smem.size()) fail("shared memory access out of range");
}

// The proxies: ldmatrix and stmatrix access shared memory through the generic proxy, TMA loads
// and stores through the async proxy, and the PTX memory model orders the two only across a
// fence.proxy.async (by the threads that made the generic accesses, before the barrier that hands
// the memory over). The emulation marks each thread's generic pieces until its fence and fails a
// TMA copy that lands on a marked one: a buffer read by ldmatrix and then reloaded by TMA, or
// written by stmatrix and then stored by TMA, with no fence between. (Plain loads and stores
// through pointers are not tracked.)
inline void note_generic(uint32_t a, uint32_t n) {
  Thread& th = *thread_ptr();
  if (th.unfenced.empty()) th.unfenced.assign((block_ptr()->smem.size() / 16 + 63) / 64, 0);
  for (uint32_t c = a / 16; c < (a + n + 15) / 16; ++c) th.unfenced[c / 64] |= 1ull << (c % 64);
  th.any_unfenced = true;
}

inline void fence_proxy_async() {
  Thread& th = *thread_ptr();
  if (th.any_unfenced) std::fill(th.unfenced.begin(), th.unfenced.end(), 0ull);
  th.any_unfenced = false;
}

inline void check_proxy_fenced(const Block& b, uint32_t a, int64_t n, const char* what) {
  for (const Thread& th : b.threads) {
    if (!th.any_unfenced) continue;
    for (uint32_t c = a / 16; c < (uint32_t)((a + n + 15) / 16); ++c) {
      if (th.unfenced[c / 64] >> (c % 64) & 1) {
        fail((std::string(what) + " on shared memory that a thread's ldmatrix or stmatrix touched with no fence.proxy.async since").c_str());
      }
    }
  }
}

// EMU_CP_ASYNC=eager lands each copy when it is issued (the earliest the hardware could): a
// buffer still being read by another warp then shows up as wrong results. The default lands it
// at the issuing thread's wait (the latest): a read before the wait shows up.
inline bool cp_async_eager() {
  static const bool eager = [] {
    const char* e = std::getenv("EMU_CP_ASYNC");
    return e && std::string(e) == "eager";
  }();
  return eager;
}

inline void land(const Copy& c) {
  unsigned char* d = smem_base() + c.dst;
  if (c.bytes > 0) std::memcpy(d, c.src, c.bytes);
  std::memset(d + c.bytes, 0, c.size - c.bytes);
}

inline void cp_async(uint32_t dst, const void* src, int size, int bytes) {
  if (dst % size != 0) fail("cp.async destination misaligned");
  if (bytes > 0 && reinterpret_cast<uintptr_t>(src) % size != 0) fail("cp.async source misaligned");
  check_smem(dst, size);
  const Copy c{dst, src, bytes, size};
  if (cp_async_eager()) land(c);
  else thread_ptr()->pending.push_back(c);
}

inline void cp_async_wait_all() {
  for (const Copy& c : thread_ptr()->pending) land(c);
  thread_ptr()->pending.clear();
}

// cp.async.mbarrier.arrive.noinc: an arrival once this thread's earlier copies have landed (the
// emulation lands them now).
inline void cp_async_mbarrier_arrive(uint32_t addr) {
  cp_async_wait_all();
  mbarrier_arrive(addr);
}

// The elements of a tile copy's box, dimension 0 fastest, each row 128 bytes with the hardware's
// 128-byte swizzle on the shared address itself (16-byte chunk bits [4,7) ^= bits [7,10)):
// f(global byte offset, or -1 out of the tensor's bounds; swizzled shared address).
template <typename F>
inline void each_box_element(const TileCopy& t, F&& f) {
  const TensorMap& m = t.map;
  const int64_t n = t.bytes / 2;
  for (int64_t i = 0; i < n; ++i) {
    int64_t rest = i, global = 0;
    bool in = true;
    for (int d = 0; d < m.rank; ++d) {
      const int64_t c = t.coord[d] + rest % m.box[d];
      rest /= m.box[d];
      in = in && c >= 0 && c < (int64_t)m.dims[d];
      global += d == 0 ? c * 2 : c * (int64_t)m.strides[d];
    }
    const uint32_t a = t.smem + (uint32_t)(2 * i);
    f(in ? global : -1, a ^ (((a >> 7) & 7u) << 4));
  }
}

// A tile copy of `map`'s box at `coord`, shared address `smem`, after the checks the emulation
// needs ("tile load" or "tile store" in their messages).
inline TileCopy tile_copy(uint32_t smem, const TensorMap* map, const int (&coord)[5], const char* what) {
  const auto bad = [&](const char* why) { fail((std::string(what) + ": " + why).c_str()); };
  if (map->rank < 1 || map->rank > 5 || !map->base) bad("tensor map not encoded");
  if (map->box[0] * 2 != 128) bad("the emulation models boxes of 128-byte rows (the 128B swizzle's span)");
  if (smem % 128 != 0) bad("shared address not 128-byte aligned");
  int64_t bytes = 2;
  for (int d = 0; d < map->rank; ++d) bytes *= map->box[d];
  check_smem(smem, (size_t)bytes);
  TileCopy t{*map, smem, {}, bytes, block_ptr()};
  for (int d = 0; d < 5; ++d) t.coord[d] = coord[d];
  return t;
}

// cp.async.bulk.tensor (tile mode, mbarrier::complete_tx) to shared memory; elements out of the
// tensor's bounds are zeros. EMU_CP_ASYNC=eager lands it at issue; else it lands when a thread
// waits on the mbarrier with its arrivals all in (mbarrier_settle).
inline void land_tile(const TileCopy& t) {
  check_proxy_fenced(*t.block, t.smem, t.bytes, "a TMA load landed");
  each_box_element(t, [&](int64_t global, uint32_t smem) {
    uint16_t v = 0;
    if (global >= 0) std::memcpy(&v, static_cast<const unsigned char*>(t.map.base) + global, 2);
    std::memcpy(t.block->smem.data() + smem, &v, 2);
  });
}

// Load t into its block's shared memory, its bytes credited to that block's mbarrier at `bar`.
inline void queue_tile_load(const TileCopy& t, uint32_t bar) {
  MBarrier& m = mbarrier_at(*t.block, bar);
  if (cp_async_eager()) {
    land_tile(t);
    m.tx -= t.bytes;
    mbarrier_settle(*t.block, m, false);
  } else {
    m.loads.push_back(t);
  }
}

inline void tile_load(uint32_t dst, const TensorMap* map, const int (&coord)[5], uint32_t bar) {
  queue_tile_load(tile_copy(dst, map, coord, "tile load"), bar);
}

// .multicast::cluster: the box to shared address `dst` of every block of the cluster whose rank's
// bit is set in `mask`, each crediting its own mbarrier at `bar`.
inline void tile_load_multicast(uint32_t dst, const TensorMap* map, const int (&coord)[5], uint32_t bar, uint16_t mask) {
  TileCopy t = tile_copy(dst, map, coord, "multicast tile load");
  if (mask >> block_ptr()->cluster->size()) fail("multicast tile load: a rank past the cluster in the mask");
  for (uint32_t r = 0; r < block_ptr()->cluster->size(); ++r) {
    if (!(mask >> r & 1)) continue;
    t.block = &cluster_block(r, "a multicast tile load");
    queue_tile_load(t, bar);
  }
}

// cp.async.bulk.tensor to global (bulk_group): elements out of the tensor's bounds are skipped
// (the hardware clips them). The hardware may read the shared source any time until the
// cp.async.bulk.wait_group.read that retires the store's group; the emulation reads it then, the
// latest, so a source rewritten before that wait stores the new bytes and fails the check that
// reads them back (EMU_CP_ASYNC=eager: at issue, the earliest).
inline void land_store(const TileCopy& t) {
  check_proxy_fenced(*t.block, t.smem, t.bytes, "a TMA store read");
  each_box_element(t, [&](int64_t global, uint32_t smem) {
    if (global >= 0) std::memcpy(static_cast<unsigned char*>(const_cast<void*>(t.map.base)) + global, t.block->smem.data() + smem, 2);
  });
}

inline void tile_store(uint32_t src, const TensorMap* map, const int (&coord)[5]) {
  const TileCopy t = tile_copy(src, map, coord, "tile store");
  if (cp_async_eager()) land_store(t);
  else thread_ptr()->stores_open.push_back(t);
}

// cp.async.bulk.commit_group and cp.async.bulk.wait_group.read n: this thread's stores in groups;
// the wait lands every group but the newest n.
inline void bulk_commit() {
  Thread& th = *thread_ptr();
  th.store_groups.push_back(std::move(th.stores_open));
  th.stores_open.clear();
}
inline void bulk_wait_read(int n) {
  Thread& th = *thread_ptr();
  while ((int)th.store_groups.size() > n) {
    for (const TileCopy& t : th.store_groups.front()) land_store(t);
    th.store_groups.pop_front();
  }
}

inline uint16_t smem_b16(uint32_t a) {
  check_smem(a, 2);
  uint16_t v;
  std::memcpy(&v, smem_base() + a, 2);
  return v;
}

// ldmatrix.x4 (trans: each 8x8 matrix transposed). Lane l addresses row (l & 7) of matrix l >> 3.
inline void ldmatrix_x4(uint32_t addr, uint32_t (&r)[4], bool trans) {
  struct Out { uint32_t r[4]; };
  Out o = collective<uint32_t, Out>(trans ? kLdsmT : kLdsm, addr, [trans](const uint32_t* in, Out* out) {
    for (int l = 0; l < 32; ++l)
      if (in[l] % 16 != 0) fail("ldmatrix row address not 16-byte aligned");
    for (int m = 0; m < 4; ++m) {
      uint16_t M[8][8];
      for (int row = 0; row < 8; ++row)
        for (int c = 0; c < 8; ++c) M[row][c] = smem_b16(in[8 * m + row] + 2 * c);
      for (int l = 0; l < 32; ++l) {
        const int g = l >> 2, t = l & 3;
        const uint16_t lo = trans ? M[2 * t][g] : M[g][2 * t];
        const uint16_t hi = trans ? M[2 * t + 1][g] : M[g][2 * t + 1];
        out[l].r[m] = (uint32_t)lo | ((uint32_t)hi << 16);
      }
    }
  });
  for (int i = 0; i < 4; ++i) r[i] = o.r[i];
  note_generic(addr, 16);  // this lane's row
}

// stmatrix.x4 (sm_90): lane l addresses row (l & 7) of matrix l >> 3; register m of lane 4g + t
// holds matrix m's elements (g, 2t) and (g, 2t + 1), the ldmatrix layout.
inline void stmatrix_x4(uint32_t addr, const uint32_t (&r)[4]) {
  struct In { uint32_t addr; uint32_t r[4]; };
  collective<In, int>(kStsm, In{addr, {r[0], r[1], r[2], r[3]}}, [](const In* in, int* out) {
    for (int l = 0; l < 32; ++l) {
      if (in[l].addr % 16 != 0) fail("stmatrix row address not 16-byte aligned");
      check_smem(in[l].addr, 16);
      out[l] = 0;
    }
    for (int m = 0; m < 4; ++m)
      for (int l = 0; l < 32; ++l) std::memcpy(smem_base() + in[8 * m + (l >> 2)].addr + 4 * (l & 3), &in[l].r[m], 4);
  });
  note_generic(addr, 16);  // this lane's row
}

inline float bf16_bits_to_f32(uint16_t b) {
  const uint32_t u = (uint32_t)b << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, d = a·b + c.
inline void mma_m16n8k16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  struct In { uint32_t a[4]; uint32_t b[2]; float c[4]; };
  struct Out { float d[4]; };
  In in;
  for (int i = 0; i < 4; ++i) in.a[i] = a[i], in.c[i] = c[i];
  in.b[0] = b0;
  in.b[1] = b1;
  Out o = collective<In, Out>(kMma, in, [](const In* in, Out* out) {
    double A[16][16], Bt[8][16];  // B transposed: a column's 16 values side by side
    float C[16][8];
    for (int l = 0; l < 32; ++l) {
      const int g = l >> 2, t = l & 3;
      const int ar[4] = {g, g + 8, g, g + 8}, ac[4] = {2 * t, 2 * t, 2 * t + 8, 2 * t + 8};
      for (int i = 0; i < 4; ++i) {
        A[ar[i]][ac[i]] = bf16_bits_to_f32(in[l].a[i] & 0xffff);
        A[ar[i]][ac[i] + 1] = bf16_bits_to_f32(in[l].a[i] >> 16);
      }
      for (int i = 0; i < 2; ++i) {
        Bt[g][2 * t + 8 * i] = bf16_bits_to_f32(in[l].b[i] & 0xffff);
        Bt[g][2 * t + 8 * i + 1] = bf16_bits_to_f32(in[l].b[i] >> 16);
      }
      C[g][2 * t] = in[l].c[0];
      C[g][2 * t + 1] = in[l].c[1];
      C[g + 8][2 * t] = in[l].c[2];
      C[g + 8][2 * t + 1] = in[l].c[3];
    }
    // Four double sums over k in order at a time (a row's columns j..j+3), side by side.
    float D[16][8];
    for (int i = 0; i < 16; ++i)
      for (int j = 0; j < 8; j += 4) {
        double s0 = C[i][j], s1 = C[i][j + 1], s2 = C[i][j + 2], s3 = C[i][j + 3];
        for (int k = 0; k < 16; ++k) {
          const double a = A[i][k];
          s0 += a * Bt[j][k], s1 += a * Bt[j + 1][k], s2 += a * Bt[j + 2][k], s3 += a * Bt[j + 3][k];
        }
        D[i][j] = (float)s0, D[i][j + 1] = (float)s1, D[i][j + 2] = (float)s2, D[i][j + 3] = (float)s3;
      }
    for (int l = 0; l < 32; ++l) {
      const int g = l >> 2, t = l & 3;
      out[l].d[0] = D[g][2 * t];
      out[l].d[1] = D[g][2 * t + 1];
      out[l].d[2] = D[g + 8][2 * t];
      out[l].d[3] = D[g + 8][2 * t + 1];
    }
  });
  for (int i = 0; i < 4; ++i) c[i] = o.d[i];
}

}  // namespace emu
