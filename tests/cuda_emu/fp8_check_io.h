// The host side shared by the FP8 emulator checks (fp8_check.cc, fp8_blockwise_check.cc): a
// scratch allocator for OpCall, f32 bit patterns read as hex from stdin, and buffers that start an
// element offset past a 16-byte boundary (unaligned views). Include after cuda/op.cc.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace fp8_check {

struct HostScratch : mdlm::Scratch {
  std::vector<std::vector<char>> blocks;
  void* get(size_t bytes) override {
    blocks.emplace_back(bytes + 256);
    auto p = reinterpret_cast<uintptr_t>(blocks.back().data());
    return reinterpret_cast<void*>((p + 255) / 256 * 256);
  }
};

// kProgram: the including check's name, for the message.
extern const char* const kProgram;

uint32_t read_hex() {
  unsigned b = 0;
  if (std::scanf("%x", &b) != 1) {
    std::fprintf(stderr, "%s: input ends early\n", kProgram);
    std::exit(2);
  }
  return b;
}

// 16-byte aligned storage with room for an offset.
template <typename T>
struct Buffer {
  std::vector<T> data;
  size_t offset;
  Buffer(size_t n, size_t off) : data(n + off + 16), offset(off) {}
  T* ptr() {
    auto p = reinterpret_cast<uintptr_t>(data.data());
    return reinterpret_cast<T*>((p + 15) / 16 * 16) + offset;
  }
};

}  // namespace fp8_check
