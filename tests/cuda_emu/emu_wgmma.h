// The warp emulator's wgmma (tests/cuda_emu/warp_emu.h): warpgroup MMAs read through their
// matrix descriptors at issue, and commit groups whose operands must not change before the wait
// that retires them.
#pragma once

#include "emu_memory.h"

namespace emu {

// ---- wgmma (sm_90a) ----

// Shared-memory byte address of element (mn, k) of a 16-bit operand under a 128B-swizzled
// descriptor: K-major ((8,m),(8,2)):((128 B, SBO),(2 B, 16 B)), MN-major
// ((64,m),(8,k)):((2 B, LBO),(128 B, SBO)), then the swizzle on the address bits.
inline uint32_t gmma_address(uint64_t desc, bool mn_major, int mn, int k) {
  const uint32_t start = (uint32_t)(desc & 0x3fff) << 4, lbo = (uint32_t)((desc >> 16) & 0x3fff) << 4,
                 sbo = (uint32_t)((desc >> 32) & 0x3fff) << 4;
  if ((desc >> 62) != 1) fail("wgmma: only 128B-swizzled descriptors are modelled");
  const uint32_t a = mn_major ? start + (mn % 64) * 2 + (mn / 64) * lbo + (k % 8) * 128 + (k / 8) * sbo
                              : start + (mn % 8) * 128 + (mn / 8) * sbo + k * 2;
  return a ^ (((a >> 7) & 7) << 4);
}

// The product of the wgmma gathered in s: A (registers or shared memory) and B read, each
// thread's accumulator written.
inline void wgmma_compute(GroupSlot& s, int n) {
  double A[64][16];
  std::vector<double> Bt(16 * n);  // B transposed: a column's 16 values side by side
  for (int m = 0; m < 64; ++m)
    for (int k = 0; k < 16; ++k) {
      uint16_t bits;
      if (s.a_regs) {
        const int w = m / 16, r = m % 16, g8 = r % 8, hi = r / 8, kb = k / 8, t2 = (k % 8) / 2;
        const uint32_t reg = s.a[32 * w + 4 * g8 + t2][hi + 2 * kb];
        bits = (k % 2) ? reg >> 16 : reg & 0xffff;
      } else {
        const uint32_t addr = gmma_address(s.desc_a, s.trans_a, m, k);
        bits = smem_b16(addr);
        s.open.emplace_back(addr, bits);
      }
      A[m][k] = bf16_bits_to_f32(bits);
    }
  for (int k = 0; k < 16; ++k)
    for (int j = 0; j < n; ++j) {
      const uint32_t addr = gmma_address(s.desc_b, s.trans_b, j, k);
      const uint16_t bits = smem_b16(addr);
      s.open.emplace_back(addr, bits);
      Bt[j * 16 + k] = bf16_bits_to_f32(bits);
    }
  for (int tt = 0; tt < 128; ++tt) {
    const int w = tt / 32, l = tt % 32, g8 = l >> 2, t4 = l & 3;
    // The thread's 4 elements of each 8-column block, rows r and r + 8, columns c and c + 1:
    // four double sums over k in order, run side by side
    const double *a0 = A[16 * w + g8], *a1 = A[16 * w + g8 + 8];
    for (int j = 0; j < n / 8; ++j) {
      float* out = &s.acc[tt][4 * j];
      const double *b0 = &Bt[(8 * j + 2 * t4) * 16], *b1 = b0 + 16;
      double s00 = 0, s01 = 0, s10 = 0, s11 = 0;
      if (s.accumulate) s00 = out[0], s01 = out[1], s10 = out[2], s11 = out[3];
      for (int k = 0; k < 16; ++k) {
        s00 += a0[k] * b0[k];
        s01 += a0[k] * b1[k];
        s10 += a1[k] * b0[k];
        s11 += a1[k] * b1[k];
      }
      out[0] = (float)s00, out[1] = (float)s01, out[2] = (float)s10, out[3] = (float)s11;
    }
  }
}

// wgmma.mma_async.m64nNk16.f32.bf16.bf16: d = A·B (+ d). A from registers (a_regs, per-warp
// mma.m16n8k16 fragments) or the descriptor desc_a; B from desc_b (trans: MN-major).
inline void wgmma(int n, const uint32_t* a_regs, uint64_t desc_a, uint64_t desc_b, bool trans_a, bool trans_b,
                  bool accumulate, float* d) {
  Block& b = *block_ptr();
  Thread& th = *thread_ptr();
  if (b.groups.empty()) fail("wgmma in a block that is not whole warpgroups");
  GroupSlot& s = b.groups[th.tid.x / 128];
  const int t = th.tid.x % 128;
  if (s.count == 0) {
    s.n = n, s.trans_a = trans_a, s.trans_b = trans_b, s.accumulate = accumulate, s.a_regs = a_regs != nullptr;
    s.desc_a = desc_a, s.desc_b = desc_b;
  } else if (s.n != n || s.trans_a != (int)trans_a || s.trans_b != (int)trans_b || s.accumulate != (int)accumulate ||
             s.a_regs != (a_regs != nullptr) || s.desc_a != desc_a || s.desc_b != desc_b) {
    fail("threads of a warpgroup issued different wgmma instructions");
  }
  s.acc[t] = d;
  if (a_regs)
    for (int i = 0; i < 4; ++i) s.a[t][i] = a_regs[i];
  rendezvous(s.count, s.gen, 128, [&s, n] { wgmma_compute(s, n); });
}


// wgmma.commit_group (op 1) and wgmma.wait_group N (op 2): all 128 threads of the warpgroup,
// the same op and N; the last to arrive does the work.
inline void wgmma_group_sync(int op, int n) {
  Block& b = *block_ptr();
  if (b.groups.empty()) fail("wgmma commit/wait in a block that is not whole warpgroups");
  GroupSlot& s = b.groups[thread_ptr()->tid.x / 128];
  const int tag = op * 1000 + n;
  if (s.sync_count == 0) s.sync_op = tag;
  else if (s.sync_op != tag) fail("threads of a warpgroup reached different wgmma commit/wait instructions");
  rendezvous(s.sync_count, s.sync_gen, 128, [&s, op, n] {
    if (op == 1) {
      s.committed.push_back(std::move(s.open));
      s.open.clear();
      return;
    }
    // Retire all but the n newest groups: what they read must still be there.
    while ((int)s.committed.size() > n) {
      for (const auto& [addr, bits] : s.committed.front())
        if (smem_b16(addr) != bits) fail("shared memory read by an in-flight wgmma changed before the wait that retires it");
      s.committed.pop_front();
    }
  });
}

inline void wgmma_commit() { wgmma_group_sync(1, 0); }
inline void wgmma_wait(int n) { wgmma_group_sync(2, n); }

}  // namespace emu
