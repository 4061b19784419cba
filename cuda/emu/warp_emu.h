// A CPU emulator for the CUDA features the attention kernels use, so cuda/attention.cu can be run
// and checked against a float64 reference on a machine without a GPU (cuda/emu/attention_check.cc).
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
// MN-major, cuda/wgmma.cuh). The hardware reads them asynchronously, any time until the
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

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace emu {

// Where a coroutine left off, switched to and from by switch_context; make_context sets one up to
// start `entry` (which must never return) on a stack of its own.
#if defined(__x86_64__)
// The System V callee-saved registers pushed on the stack being left, its stack pointer stored in
// *from, then the same popped from the stack at `to`: none of the signal-mask and unwinding work
// of glibc's jumps, which took a tenth of the emulator's time. (Weak: defined once however many
// translation units include this.)
extern "C" void mdlm_emu_switch(void** from, void* to);
asm(R"(.text
.weak mdlm_emu_switch
.type mdlm_emu_switch, @function
mdlm_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
.size mdlm_emu_switch, .-mdlm_emu_switch
)");
struct Context {
  void* sp = nullptr;
};
inline void switch_context(Context& from, Context& to) { mdlm_emu_switch(&from.sp, to.sp); }
inline void make_context(Context& c, char* stack, size_t bytes, void (*entry)()) {
  auto top = reinterpret_cast<void**>(reinterpret_cast<uintptr_t>(stack + bytes) & ~uintptr_t{15});
  *--top = nullptr;                         // entry's return address (it never returns): a call's alignment
  *--top = reinterpret_cast<void*>(entry);  // where the first switch's ret goes
  for (int i = 0; i < 6; ++i) *--top = nullptr;  // the registers it pops
  c.sp = top;
}
#else
struct Context {
  ucontext_t uc;
};
inline void switch_context(Context& from, Context& to) { swapcontext(&from.uc, &to.uc); }
inline void make_context(Context& c, char* stack, size_t bytes, void (*entry)()) {
  getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = stack;
  c.uc.uc_stack.ss_size = bytes;
  c.uc.uc_link = nullptr;
  makecontext(&c.uc, entry, 0);
}
#endif

struct Dim {
  unsigned x = 1, y = 1, z = 1;
};

struct Copy {
  uint32_t dst;
  const void* src;
  int bytes;  // copied; the rest of `size` zero-filled
  int size;
};


struct WarpSlot {
  int count = 0;
  uint64_t gen = 0;
  int op = -1;
  alignas(16) unsigned char in[32][96];
  alignas(16) unsigned char out[32][64];
};

// A warpgroup's wgmma in flight: each thread's accumulator (on its own stack, which lives while
// the thread waits) and A fragment.
struct GroupSlot {
  int count = 0;
  uint64_t gen = 0;
  int n = 0, trans_a = 0, trans_b = 0, accumulate = 0, a_regs = 0;
  uint64_t desc_a = 0, desc_b = 0;
  float* acc[128];
  uint32_t a[128][4];
  // The shared memory the warpgroup's wgmmas read (address, the 16 bits read), by commit group:
  // the hardware may read it any time until the wait that retires the group, so a change before
  // then is a race the emulation (which reads at issue) would otherwise hide.
  std::vector<std::pair<uint32_t, uint16_t>> open;
  std::deque<std::vector<std::pair<uint32_t, uint16_t>>> committed;
  // wgmma.commit_group / wait_group: collectives of the warpgroup's 128 threads.
  int sync_count = 0, sync_op = 0;
  uint64_t sync_gen = 0;
};

// A named barrier (bar.sync / bar.arrive with an id and a thread count).
struct NamedBarrier {
  int count = 0;
  uint64_t gen = 0;
  bool any = false, result = false;  // bar.red.or: the predicates so far, and the last round's OR
};

// A TMA tensor map (cuTensorMapEncodeTiled's arguments, which the hardware's opaque CUtensorMap
// encodes): bf16 elements, tiled boxes, the 128-byte swizzle, zeros out of bounds.
struct alignas(128) TensorMap {
  const void* base = nullptr;
  int rank = 0;
  uint64_t dims[5] = {};
  uint64_t strides[5] = {};  // bytes between consecutive indices of dims 1.. (dim 0 is dense)
  uint32_t box[5] = {};
};

// A TMA tile copy in flight, a load (the box at `coord` of `map` to shared address `smem`) or a
// store (from `smem` to the box). (The map is a copy: the issuing thread's parameters may be gone
// by the time it lands.)
struct Block;
struct TileCopy {
  TensorMap map;
  uint32_t smem;
  int coord[5];
  int64_t bytes;
  Block* block;  // whose shared memory: the load's destination (a multicast's each), the store's source
};

struct Thread {
  // First what the scheduler reads of every thread it passes over.
  Block* block = nullptr;
  bool done = false;
  bool gave_way = false;  // yielded able to go on (schedule_point)
  // Blocked until *wait_on moves from wait_seen (yield_until_changed): the scheduler passes over
  // it until then instead of resuming it only to have it yield again.
  const uint64_t* wait_on = nullptr;
  uint64_t wait_seen = 0;
  Dim tid;
  int lane = 0, warp = 0;
  Context ctx;  // where it yielded (or its entry)
  std::vector<Copy> pending;  // cp.async not yet waited for
  // TMA stores issued since the last bulk commit, and the committed groups not yet waited for
  std::vector<TileCopy> stores_open;
  std::deque<std::vector<TileCopy>> store_groups;
  // The 16-byte pieces of shared memory this thread's ldmatrix and stmatrix (the generic proxy)
  // touched since its last fence.proxy.async, a bit each: a TMA load or store (the async proxy)
  // landing on one fails (check_proxy_fenced).
  std::vector<uint64_t> unfenced;
  bool any_unfenced = false;
};

// An mbarrier in shared memory, by its address: arrivals still expected in the current phase,
// and its transaction count (bytes announced by expect_tx, not yet landed) with the tile loads
// that will land them.
struct MBarrier {
  uint64_t version = 0;  // version_clock() at its last change (mbarrier_at, mbarrier_settle): a waiter's wake-up
  int expected = 0, pending = 0;
  uint32_t phase = 0;  // phases completed so far
  int64_t tx = 0;
  std::vector<TileCopy> loads;
};

struct Block {
  Dim bid, grid, block;
  NamedBarrier named[16];
  std::map<uint32_t, MBarrier> mbarriers;
  int nthreads = 0;
  std::vector<Thread> threads;
  std::vector<unsigned char> smem;
  int bar_count = 0;
  uint64_t bar_gen = 0;
  std::vector<WarpSlot> warps;
  std::vector<GroupSlot> groups;
  uint64_t events = 0;  // completed barriers and collectives: progress for deadlock detection
  int slow = -1;        // the random schedule's slow thread (schedule_point), if in this block
  bool held = false;    // whether it waits for every other thread to be blocked
  // The blocks of its cluster (itself alone outside a cluster launch), its rank among them, and
  // (in the first block) the cluster barrier's count.
  std::vector<Block>* cluster = nullptr;
  int rank = 0;
  int cluster_count = 0;
  uint64_t cluster_gen = 0;
};

inline Block*& block_ptr() {
  static Block* b = nullptr;
  return b;
}
inline Thread*& thread_ptr() {
  static Thread* t = nullptr;
  return t;
}
inline Context& scheduler_context() {
  static Context c;
  return c;
}
// Thread stacks, kept from block to block: fresh ones per block (touched, zeroed and unmapped
// again each time) cost more system time than the emulation itself.
constexpr size_t kStackBytes = 256 * 1024;
inline char* thread_stack(int t) {
  static std::vector<std::unique_ptr<char[]>> stacks;
  while ((int)stacks.size() <= t) stacks.emplace_back(new char[kStackBytes]);
  return stacks[t].get();
}

inline std::function<void()>& entry() {
  static std::function<void()> f;
  return f;
}

inline void fail(const char* msg) {
  std::fprintf(stderr, "emu: %s (block %u,%u thread %u)\n", msg, block_ptr()->bid.x, block_ptr()->bid.y, thread_ptr()->tid.x);
  std::abort();
}

inline void yield() { switch_context(thread_ptr()->ctx, scheduler_context()); }

// A thread blocked on a condition that only a change of `version` can lift: yields, and is not
// resumed before `version` moves (the same runs as resuming it to find itself still blocked).
inline void yield_until_changed(const uint64_t& version) {
  Thread& th = *thread_ptr();
  th.wait_on = &version, th.wait_seen = version;
  yield();
  th.wait_on = nullptr;
}

// Counts every change of an mbarrier: MBarrier::version takes a new value at each.
inline uint64_t& version_clock() {
  static uint64_t v = 0;
  return v;
}

inline void trampoline() {
  entry()();
  if (!thread_ptr()->stores_open.empty() || !thread_ptr()->store_groups.empty()) {
    fail("a thread exited with TMA stores it had not waited for (cp.async.bulk.wait_group.read)");
  }
  thread_ptr()->done = true;
  yield();  // never resumed: the stack is abandoned
}

// The order threads run in, from EMU_SCHEDULE:
// - unset: round-robin, the threads in near lockstep;
// - skewed: the highest-numbered thread that can make progress always runs, so one warpgroup gets
//   as far ahead of another as the kernel's synchronisation allows; races that round-robin's
//   near-lockstep hides (a buffer rewritten while another warpgroup still reads it) then show up.
//   A thread also gives way at every mbarrier arrival, so one that still reads what it has just
//   released finds it rewritten.
// - random:<seed>[:<odds>]: as skewed, from a random order of the threads (the seed's own for
//   each block), and with one slow thread: lane 0 of warp seed mod W (W warps a block) for the
//   seeds below W (where single-thread roles live: the TMA issuer is lane 0 of the producer
//   warpgroup's first warp), a random lane of that warp for the next W seeds, and so on. At each of
//   its schedule points (mbarrier arrivals, the start and end of mbarrier waits, named-barrier
//   arrivals) it is held with probability 1/odds (default 2) and runs again only once every other
//   thread is blocked. A race that needs one thread held at one point while the others run on as
//   far as they can (the TMA issuer between two of its mbarrier operations, say, with both
//   consumer warpgroups passing it) shows up in the seeds whose slow thread is that one, where
//   skewed and round-robin never hold it there.
struct Schedule {
  enum Kind { kRoundRobin, kSkewed, kRandom } kind = kRoundRobin;
  uint64_t seed = 0;
  uint64_t odds = 2;
};
inline const Schedule& schedule() {
  static const Schedule s = [] {
    Schedule r;
    const char* e = std::getenv("EMU_SCHEDULE");
    const std::string v = e ? e : "";
    char* end = nullptr;
    if (v == "skewed") {
      r.kind = Schedule::kSkewed;
    } else if (v.rfind("random:", 0) == 0) {
      r.kind = Schedule::kRandom;
      r.seed = std::strtoull(v.c_str() + 7, &end, 10);
      if (end && *end == ':') r.odds = std::strtoull(end + 1, &end, 10);
    }
    if (!v.empty() && r.kind == Schedule::kRoundRobin || (end && *end) || r.odds == 0) {
      std::fprintf(stderr, "emu: EMU_SCHEDULE=%s: expected skewed or random:<seed>[:<odds>]\n", v.c_str());
      std::exit(2);
    }
    return r;
  }();
  return s;
}

// The random schedule's generator (splitmix64), seeded again for each block.
inline uint64_t& schedule_state() {
  static uint64_t s = 0;
  return s;
}
inline uint64_t schedule_next() {
  uint64_t z = (schedule_state() += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// A point where the schedule may switch threads (see Schedule): an mbarrier `arrival`, or the
// start or end of a wait. Random may hold its slow thread here; skewed and random give way at
// arrivals. A thread that gives way can go on: the scheduler counts it as progress.
inline void schedule_point(bool arrival) {
  const Schedule& s = schedule();
  Thread& th = *thread_ptr();
  Block& b = *block_ptr();
  if (s.kind == Schedule::kRandom && (int)th.tid.x == b.slow && schedule_next() % s.odds == 0) b.held = true;
  else if (s.kind == Schedule::kRoundRobin || !arrival) return;
  th.gave_way = true;
  yield();
}

// What a blocked thread waits on, in words (describe_waits).
inline std::string wait_of(const Block& b, const Thread& th) {
  if (!th.wait_on) return "nothing (runnable)";
  for (const auto& [addr, m] : b.mbarriers)
    if (th.wait_on == &m.version)
      return "mbarrier at " + std::to_string(addr) + ", phase " + std::to_string(m.phase) + ": " + std::to_string(m.pending) + " of " +
             std::to_string(m.expected) + " arrivals and " + std::to_string(m.tx) + " bytes to come";
  if (th.wait_on == &b.bar_gen) return "__syncthreads: " + std::to_string(b.bar_count) + " of " + std::to_string(b.nthreads) + " in";
  for (int k = 0; k < 16; ++k)
    if (th.wait_on == &b.named[k].gen) return "named barrier " + std::to_string(k) + ": " + std::to_string(b.named[k].count) + " in";
  for (size_t w = 0; w < b.warps.size(); ++w)
    if (th.wait_on == &b.warps[w].gen) return "a collective of warp " + std::to_string(w) + ": " + std::to_string(b.warps[w].count) + " of 32 lanes in";
  for (size_t g = 0; g < b.groups.size(); ++g)
    if (th.wait_on == &b.groups[g].gen) return "a wgmma of warpgroup " + std::to_string(g) + ": " + std::to_string(b.groups[g].count) + " of 128 in";
  if (b.cluster && th.wait_on == &(*b.cluster)[0].cluster_gen) return "the cluster barrier";
  return "something else";
}

// At a deadlock: each run of consecutive threads of a block that wait on the same thing, and what.
inline void describe_waits(const std::vector<Block>& blocks) {
  for (const Block& b : blocks) {
    int first = -1;
    std::string what;
    auto flush = [&](int end) {
      if (first >= 0) std::fprintf(stderr, "  block %d, threads %d-%d: %s\n", b.rank, first, end - 1, what.c_str());
      first = -1;
    };
    for (int t = 0; t < b.nthreads; ++t) {
      const Thread& th = b.threads[t];
      const std::string w = th.done ? std::string() : wait_of(b, th);
      if (first >= 0 && w == what) continue;
      flush(t);
      if (!th.done) first = t, what = w;
    }
    flush(b.nthreads);
  }
}

// Runs kernel(args...) over the grid, one cluster at a time: `cluster` blocks of consecutive x
// indices (cudaLaunchAttributeClusterDimension {cluster, 1, 1}; 1: one block at a time), their
// threads under one scheduler, so that they meet at cluster barriers and reach into each other's
// shared memory (remote mbarrier arrivals, multicast TMA loads).
template <typename... Args, typename... Given>
void launch_clusters(int cluster, void (*kernel)(Args...), dim3 grid, int threads, size_t smem, Given&&... given) {
  if (cluster < 1 || grid.x % cluster != 0) {
    std::fprintf(stderr, "emu: a grid of %u blocks in x does not split into clusters of %d\n", grid.x, cluster);
    std::abort();
  }
  std::function<void()> call = [&]() { kernel(given...); };
  entry() = call;
  const int total = cluster * threads;
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx0 = 0; bx0 < grid.x; bx0 += cluster) {
        std::vector<Block> blocks(cluster);
        std::vector<Thread*> all;  // the cluster's threads, block by block
        for (int r = 0; r < cluster; ++r) {
          Block& b = blocks[r];
          b.bid = {bx0 + r, by, bz};
          b.grid = {grid.x, grid.y, grid.z};
          b.block = {(unsigned)threads, 1, 1};
          b.nthreads = threads;
          b.cluster = &blocks;
          b.rank = r;
          // Poison shared memory so reads of never-written bytes show up as NaN (0xffff bf16 / f32).
          b.smem.assign(smem, 0xff);
          b.warps.resize((threads + 31) / 32);
          b.groups.resize(threads / 128);
          b.threads.resize(threads);
          for (int t = 0; t < threads; ++t) {
            Thread& th = b.threads[t];
            th.block = &b;
            th.tid = {(unsigned)t, 0, 0};
            th.lane = t & 31;
            th.warp = t >> 5;
            make_context(th.ctx, thread_stack(r * threads + t), kStackBytes, trampoline);
            all.push_back(&th);
          }
        }
        // The order the scheduler visits threads in: round-robin from the first; skewed from the
        // last; random from a shuffle. The latter two start again from the first of the order
        // whenever something completed, so the first threads run as far ahead as they can.
        const Schedule& sched = schedule();
        const bool priority = sched.kind != Schedule::kRoundRobin;
        std::vector<int> order(total);
        for (int t = 0; t < total; ++t) order[t] = sched.kind == Schedule::kSkewed ? total - 1 - t : t;
        if (sched.kind == Schedule::kRandom) {
          schedule_state() = sched.seed * 0x2545f4914f6cdd1dull + ((uint64_t)bz * grid.y + by) * grid.x + bx0;
          for (int t = total - 1; t > 0; --t) std::swap(order[t], order[schedule_next() % (t + 1)]);
          // The slow thread (see Schedule), in block seed / 2W of the cluster (mod its size).
          const uint64_t warps = blocks[0].warps.size();
          const int lane = sched.seed / warps % 2 == 0 ? 0 : (int)(schedule_next() % 32);
          blocks[sched.seed / (2 * warps) % cluster].slow = std::min(threads - 1, 32 * (int)(sched.seed % warps) + lane);
        }
        const auto events = [&] {
          uint64_t e = 0;
          for (const Block& b : blocks) e += b.events;
          return e;
        };
        int stalled_rounds = 0;
        for (;;) {
          bool all_done = true, progress = false;
          for (int i = 0; i < total; ++i) {
            Thread& th = *all[order[i]];
            Block& b = *th.block;
            if (th.done) continue;
            all_done = false;
            if (b.held && (int)th.tid.x == b.slow) continue;
            if (th.wait_on && *th.wait_on == th.wait_seen) continue;
            block_ptr() = &b;
            thread_ptr() = &th;
            const uint64_t before = events();
            switch_context(scheduler_context(), th.ctx);
            const bool moved = events() != before || th.done || th.gave_way;
            progress = progress || moved;
            th.gave_way = false;
            if (priority && moved) i = -1;
          }
          if (all_done) break;
          Block* held = nullptr;
          for (Block& b : blocks) held = b.held ? &b : held;
          if (progress) {
            stalled_rounds = 0;
          } else if (held) {  // every other thread is blocked: the slow one goes on
            held->held = false;
          } else if (++stalled_rounds > 3) {
            std::fprintf(stderr, "emu: deadlock in %s (%u,%u,%u)\n", cluster > 1 ? "the cluster of block" : "block", bx0, by, bz);
            describe_waits(blocks);
            std::abort();
          }
        }
        block_ptr() = nullptr;
      }
}

// Runs kernel(args...) over the grid, one block at a time.
template <typename... Args, typename... Given>
void launch(void (*kernel)(Args...), dim3 grid, int threads, size_t smem, Given&&... given) {
  launch_clusters(1, kernel, grid, threads, smem, std::forward<Given>(given)...);
}

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
using std::max;
using std::min;
