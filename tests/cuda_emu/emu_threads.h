// The warp emulator's threads and blocks (tests/cuda_emu/warp_emu.h): every CUDA thread a
// coroutine, the scheduler that resumes them (EMU_SCHEDULE), the deadlock report, and the launch
// of a grid of blocks or clusters.
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

}  // namespace emu
