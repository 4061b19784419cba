// Runs cuda/quantize_fp8_blockwise.cu on the CPU through the warp emulator
// (tests/cuda_emu/warp_emu.h) for tests/cuda_build.test.ts, which compares every bit with the
// op's reference (src/ops/quantize_fp8_blockwise.ts). Values travel as f32 bit patterns in hex, a
// value a line; one multiprocessor makes the passes' grids 8 blocks, so that blocks walk several
// strips or tiles:
//   rows cols format block transpose margin dtype offset: x (rows · cols values; bf16: the upper
//   16 bits) -> scaleInv (count values), then out's codes; x and out start `offset` elements
//   into their buffers (unaligned views), scaleInv at its buffer's start, poisoned first
//
//   g++ -std=c++17 -O2 -fno-strict-aliasing -DWARP_EMULATOR -I/usr/local/cuda/include -Itests/cuda_emu \
//       tests/cuda_emu/fp8_blockwise_check.cc -L/usr/local/cuda/lib64 -lcudart -o /tmp/fp8_blockwise_check
#include "warp_emu.h"

#include "../../cuda/quantize_fp8_blockwise.cu"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../../cuda/op.cc"  // the registry and OpCall accessors, as the addon builds them
#include "fp8_check_io.h"

const char* const fp8_check::kProgram = "fp8_blockwise_check";

namespace {

using mdlm::DType;

using fp8_check::Buffer;
using fp8_check::HostScratch;
using fp8_check::read_hex;

}  // namespace

int main(int argc, char** argv) {
  if (argc != 9) {
    std::fprintf(stderr, "usage: fp8_blockwise_check rows cols format block transpose margin dtype offset\n");
    return 2;
  }
  const int64_t rows = std::atoll(argv[1]), cols = std::atoll(argv[2]);
  const std::string format = argv[3], block = argv[4];
  const bool transpose = std::atoi(argv[5]) != 0;
  const int margin = std::atoi(argv[6]);
  const bool bf16 = std::strcmp(argv[7], "bf16") == 0;
  const size_t offset = std::atoi(argv[8]), n = static_cast<size_t>(rows * cols);
  Buffer<float> xf(n, offset);
  Buffer<uint16_t> xb(n, offset);
  for (size_t i = 0; i < n; i++) {
    const uint32_t b = read_hex();
    if (bf16) xb.ptr()[i] = static_cast<uint16_t>(b >> 16);
    else xf.ptr()[i] = mdlm::bits_f32(b);
  }
  // scaleInv's element count, as the declaration's shape
  const int64_t R = transpose ? cols : rows, C = transpose ? rows : cols;
  const int64_t count = block == "1x128" ? (C + 127) / 128 * ((R + 3) / 4 * 4) : (R + 127) / 128 * (((C + 127) / 128 + 3) / 4 * 4);
  std::vector<float> scale_inv(count, std::nanf(""));
  Buffer<uint8_t> out(n, offset);
  cudaDeviceProp device{};
  device.multiProcessorCount = 1;
  device.major = 9;
  HostScratch scratch;
  mdlm::OpCall call;
  call.op = "quantize_fp8_blockwise";
  call.scratch = &scratch;
  call.device = &device;
  call.nums = {{"rows", rows}, {"cols", cols}, {"transpose", transpose}, {"margin", margin}};
  call.strs = {{"format", format}, {"block", block}};
  call.args["x"] = {bf16 ? static_cast<void*>(xb.ptr()) : static_cast<void*>(xf.ptr()), bf16 ? DType::bf16 : DType::f32, static_cast<int64_t>(n)};
  call.args["out"] = {out.ptr(), format == "e4m3" ? DType::fp8e4m3 : DType::fp8e5m2, static_cast<int64_t>(n)};
  call.args["scaleInv"] = {scale_inv.data(), DType::f32, count};
  mdlm::find_launcher("quantize_fp8_blockwise")(call);
  for (float s : scale_inv) std::printf("%x\n", mdlm::f32_bits(s));
  for (size_t i = 0; i < n; i++) std::printf("%x\n", out.ptr()[i]);
  return 0;
}
