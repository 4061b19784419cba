// Device memory for the addon: cudaMalloc with a user-facing out-of-memory error, and the per-call
// scratch arena the launchers draw from (cuda/op.h's Scratch).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <vector>

#include "../op.h"

namespace mdlm::addon {

constexpr size_t kAlign = 256;

inline size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }

inline std::string mib(size_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

// cudaMalloc, with out-of-memory as a user-facing error that says how much was free.
void* device_alloc(size_t bytes, const char* what);

// The per-call scratch: a bump allocator over one block, reset at every call. A call that wants
// more gets extra blocks for that call; the next call then drains the stream (in-flight work may
// still use the old blocks) and replaces them by one block of the largest total seen, so a
// steady-state loop allocates nothing. While a CUDA graph is captured the block is fixed (the
// graph keeps its addresses; draining a capturing stream is illegal): a call that would need more
// fails and asks for the work to run once uncaptured first.
class Arena final : public Scratch {
 public:
  explicit Arena(cudaStream_t stream) : stream_(stream) {}
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  ~Arena() override { release(); }

  // Replace the blocks by one of the high-water size if the last call needed extra ones.
  void settle();

  void begin_call() {
    if (!capturing_) settle();
    used_ = 0;
  }

  void set_capturing(bool on) { capturing_ = on; }

  void* get(size_t bytes) override;

 private:
  void release();

  cudaStream_t stream_;
  bool capturing_ = false;
  char* base_ = nullptr;
  size_t size_ = 0;
  size_t used_ = 0;
  size_t high_water_ = 0;
  std::vector<void*> extra_;
};

}  // namespace mdlm::addon
