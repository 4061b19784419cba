// The warp emulator's barriers and warp collectives (tests/cuda_emu/warp_emu.h): __syncthreads,
// named barriers, mbarriers (arrivals, transaction bytes, clusters), shuffles, votes and redux.
#pragma once

#include "emu_threads.h"

namespace emu {

// ---- barriers and warp collectives ----

// What every barrier and collective is built on: the n-th thread to arrive runs `last` (which
// sees all the arrivals' inputs), then all n go on.
template <typename F>
void rendezvous(int& count, uint64_t& gen, int n, F last) {
  const uint64_t g = gen;
  if (++count < n) {
    while (gen == g) yield_until_changed(gen);
    return;
  }
  last();
  count = 0;
  ++gen;
  ++block_ptr()->events;
}

inline void syncthreads() {
  Block& b = *block_ptr();
  rendezvous(b.bar_count, b.bar_gen, b.nthreads, [] {});
}

// bar.sync id, count (arrive = false) and bar.arrive id, count: the barrier completes when
// `count` threads have arrived either way; only bar.sync waits for it. Returns the OR of the
// arrivals' predicates (bar.red.or.pred; plain arrivals bring false). A round's waiters read its
// result before the next round can complete (that needs their own arrivals).
inline bool named_barrier(int id, int count, bool arrive, bool pred = false) {
  Block& b = *block_ptr();
  if (id <= 0 || id >= 16) fail("named barrier id out of range (1..15; 0 is __syncthreads)");
  NamedBarrier& nb = b.named[id];
  const uint64_t g = nb.gen;
  nb.any = nb.any || pred;
  bool result = false;
  if (++nb.count == count) {
    result = nb.result = nb.any;
    nb.any = false;
    nb.count = 0;
    ++nb.gen;
    ++b.events;
  } else {
    if (nb.count > count) fail("named barrier: more arrivals than its count");
    if (!arrive) {
      while (nb.gen == g) yield_until_changed(nb.gen);
      result = nb.result;
    }
  }
  schedule_point(false);
  return result;
}

// Block b's mbarrier at addr, to look at; mbarrier_at to change it (its waiters then look again).
inline MBarrier& mbarrier_find(Block& b, uint32_t addr) {
  auto it = b.mbarriers.find(addr);
  if (it == b.mbarriers.end()) fail("mbarrier used before mbarrier.init");
  return it->second;
}
inline MBarrier& mbarrier_at(Block& b, uint32_t addr) {
  MBarrier& m = mbarrier_find(b, addr);
  m.version = ++version_clock();
  return m;
}
inline MBarrier& mbarrier_at(uint32_t addr) { return mbarrier_at(*block_ptr(), addr); }

inline void mbarrier_init(uint32_t addr, int count) {
  if (addr % 8 != 0) fail("mbarrier misaligned");
  block_ptr()->mbarriers[addr] = MBarrier{++version_clock(), count, count, 0};
}

void land_tile(const TileCopy& t);

// Completes the phase of block `owner`'s mbarrier m once every arrival is in and every announced
// byte has landed. Queued tile loads land only when `land` (a thread waiting on the mbarrier: the
// latest the hardware could land them, so a reader that skips the wait sees the poisoned tile); a
// load that lands more bytes than were announced is an error (the hardware would complete the
// phase early). Bytes may land before they are announced (the hardware's transaction count goes
// below zero): another block's multicast, say, ahead of this block's expect_tx.
inline void mbarrier_settle(Block& owner, MBarrier& m, bool land) {
  if (m.pending > 0) return;
  if (land && !m.loads.empty()) {
    for (const TileCopy& t : m.loads) {
      land_tile(t);
      m.tx -= t.bytes;
    }
    m.loads.clear();
    m.version = ++version_clock();
  }
  if (!m.loads.empty()) return;
  if (m.tx < 0) fail("mbarrier: tile loads landed more bytes than expect_tx announced");
  if (m.tx > 0) return;  // a load still to be issued
  m.pending = m.expected;
  ++m.phase;
  ++owner.events;
  m.version = ++version_clock();
}

// The block of rank `rank` in this one's cluster, which must not have exited (every thread done:
// its shared memory is gone).
inline Block& cluster_block(uint32_t rank, const char* what) {
  Block& b = *block_ptr();
  if (rank >= b.cluster->size()) fail((std::string(what) + ": cluster rank out of range").c_str());
  Block& peer = (*b.cluster)[rank];
  if (std::all_of(peer.threads.begin(), peer.threads.end(), [](const Thread& th) { return th.done; })) {
    fail((std::string(what) + " on a block of the cluster that has exited").c_str());
  }
  return peer;
}

// An arrival on block b's mbarrier at addr.
inline void mbarrier_arrive_on(Block& b, uint32_t addr) {
  MBarrier& m = mbarrier_at(b, addr);
  if (m.pending == 0) fail("mbarrier: an arrival after the phase's last one, before its bytes landed");
  --m.pending;
  mbarrier_settle(b, m, false);
  schedule_point(true);
}
inline void mbarrier_arrive(uint32_t addr) { mbarrier_arrive_on(*block_ptr(), addr); }

// mbarrier.arrive.release.cluster.shared::cluster on the mbarrier at the same address in the
// block of cluster rank `rank` (mapa).
inline void mbarrier_arrive_cluster(uint32_t addr, uint32_t rank) { mbarrier_arrive_on(cluster_block(rank, "a remote mbarrier arrival"), addr); }

// %cluster_ctarank, and barrier.cluster.arrive + wait: every thread of every block of the cluster.
inline uint32_t cluster_ctarank() { return (uint32_t)block_ptr()->rank; }
inline void cluster_sync() {
  Block& first = (*block_ptr()->cluster)[0];
  rendezvous(first.cluster_count, first.cluster_gen, (int)block_ptr()->cluster->size() * block_ptr()->nthreads, [] {});
}

// mbarrier.arrive.expect_tx: announces `bytes` of tile loads for the current phase, then arrives.
inline void mbarrier_arrive_expect_tx(uint32_t addr, uint32_t bytes) {
  mbarrier_at(addr).tx += bytes;
  mbarrier_arrive(addr);
}

// mbarrier.try_wait.parity in a loop: returns once the phase of that parity has completed (the
// current phase's parity differs from it).
inline void mbarrier_wait(uint32_t addr, uint32_t parity) {
  schedule_point(false);
  for (;;) {
    // Looking changes nothing; landing its loads or completing its phase does (mbarrier_settle).
    MBarrier& m = mbarrier_find(*block_ptr(), addr);
    if ((m.phase & 1u) == (parity & 1u)) mbarrier_settle(*block_ptr(), m, true);
    if ((m.phase & 1u) != (parity & 1u)) break;
    yield_until_changed(m.version);
  }
  schedule_point(false);
}

// All 32 lanes of the warp must call this with the same op; compute(ins, outs) runs once.
template <typename In, typename Out, typename F>
Out collective(int op, const In& in, F compute) {
  static_assert(sizeof(In) <= 96 && sizeof(Out) <= 64, "collective payload");
  Block& b = *block_ptr();
  Thread& th = *thread_ptr();
  WarpSlot& w = b.warps[th.warp];
  if (w.count == 0) w.op = op;
  else if (w.op != op) fail("lanes of a warp reached different collectives (divergence)");
  std::memcpy(w.in[th.lane], &in, sizeof(In));
  rendezvous(w.count, w.gen, 32, [&] {
    In ins[32];
    Out outs[32];
    for (int l = 0; l < 32; ++l) std::memcpy(&ins[l], w.in[l], sizeof(In));
    compute(ins, outs);
    for (int l = 0; l < 32; ++l) std::memcpy(w.out[l], &outs[l], sizeof(Out));
  });
  Out o;
  std::memcpy(&o, w.out[th.lane], sizeof(Out));
  return o;
}

enum Op { kSyncWarp = 1, kShflXor, kShfl, kRedMin, kRedMax, kAny, kLdsm, kLdsmT, kStsm, kMma };

inline void syncwarp() {
  collective<int, int>(kSyncWarp, 0, [](const int*, int* o) { for (int l = 0; l < 32; ++l) o[l] = 0; });
}

template <typename T>
T shfl_xor(T v, int mask) {
  struct In { T v; int m; };
  return collective<In, T>(kShflXor, In{v, mask}, [](const In* in, T* out) {
    for (int l = 0; l < 32; ++l) out[l] = in[l ^ (in[l].m & 31)].v;
  });
}

template <typename T>
T shfl(T v, int src) {
  struct In { T v; int s; };
  return collective<In, T>(kShfl, In{v, src}, [](const In* in, T* out) {
    for (int l = 0; l < 32; ++l) out[l] = in[in[l].s & 31].v;
  });
}

inline int reduce_min(int v) {
  return collective<int, int>(kRedMin, v, [](const int* in, int* out) {
    int m = in[0];
    for (int l = 1; l < 32; ++l) m = std::min(m, in[l]);
    for (int l = 0; l < 32; ++l) out[l] = m;
  });
}

inline int reduce_max(int v) {
  return collective<int, int>(kRedMax, v, [](const int* in, int* out) {
    int m = in[0];
    for (int l = 1; l < 32; ++l) m = std::max(m, in[l]);
    for (int l = 0; l < 32; ++l) out[l] = m;
  });
}

inline int any(int pred) {
  return collective<int, int>(kAny, pred ? 1 : 0, [](const int* in, int* out) {
    int a = 0;
    for (int l = 0; l < 32; ++l) a |= in[l];
    for (int l = 0; l < 32; ++l) out[l] = a;
  });
}

}  // namespace emu
