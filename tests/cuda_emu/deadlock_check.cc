// Checks the warp emulator's deadlock report (tests/cuda_emu/warp_emu.h): a block whose first warp waits
// on an mbarrier one arrival short and whose second waits at a named barrier a warp short (the
// third exits) must abort, naming each run of blocked threads and what it waits on.
//
//   g++ -std=c++17 -O2 -DWARP_EMULATOR -I/usr/local/cuda/include -Itests/cuda_emu tests/cuda_emu/deadlock_check.cc \
//       -L/usr/local/cuda/lib64 -lcudart -o /tmp/deadlock_check && /tmp/deadlock_check
#include <cstdio>

#include "warp_emu.h"

void stuck() {
  const uint32_t bar = 0;
  if (threadIdx.x == 0) ::emu::mbarrier_init(bar, 33);
  ::emu::syncthreads();
  if (threadIdx.x < 32) {
    ::emu::mbarrier_arrive(bar);
    ::emu::mbarrier_wait(bar, 0);
  } else if (threadIdx.x < 64) {
    ::emu::named_barrier(1, 96, false);
  }
}

int main() {
  ::emu::launch(stuck, dim3(1), 96, 64);
  std::puts("no deadlock");
  return 0;
}
