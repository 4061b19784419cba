// The addon's device memory: cuda/addon/arena.h.
#include "arena.h"

namespace mdlm::addon {

void* device_alloc(size_t bytes, const char* what) {
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // not sticky: clear it so later calls do not report it again
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    throw OpError("OUT_OF_MEMORY", std::string("cuda: cannot allocate ") + mib(bytes) + " for " + what + " (" + mib(free_b) +
                                       " free of " + mib(total_b) + "); use a smaller batch or model");
  }
  check_cuda(e, what);
  return p;
}

void Arena::settle() {
  if (extra_.empty()) return;
  check_cuda(cudaStreamSynchronize(stream_), "scratch: cudaStreamSynchronize before growing");
  release();
  base_ = static_cast<char*>(device_alloc(high_water_, "the scratch arena"));
  size_ = high_water_;
}

void* Arena::get(size_t bytes) {
  bytes = round_up(bytes == 0 ? 1 : bytes, kAlign);
  used_ += bytes;
  if (used_ > high_water_) high_water_ = used_;
  if (used_ <= size_) return base_ + (used_ - bytes);
  if (capturing_) {
    throw OpError("BAD_ARGUMENT", "cuda: an op needs " + mib(used_) + " of scratch while a CUDA graph is recorded, more than the arena's " + mib(size_) +
                                      "; run the same work once unrecorded before recording it");
  }
  extra_.push_back(device_alloc(bytes, "scratch"));
  return extra_.back();
}

void Arena::release() {
  if (base_) cudaFree(base_);
  for (void* p : extra_) cudaFree(p);
  base_ = nullptr;
  size_ = 0;
  extra_.clear();
}

}  // namespace mdlm::addon
