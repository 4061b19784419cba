// Runs cuda/quantize_fp8.cu and cuda/fp8_scale_update.cu on the CPU through the warp emulator
// (tests/cuda_emu/warp_emu.h), and cuda/fp8.cuh's scale and quantisation on the host, for
// tests/cuda_build.test.ts, which compares every bit with src/ops/fp8.ts and the ops' references.
// Values travel as f32 bit patterns in hex, a value a line (no GPU needed; the emulator's device
// memory is the host's; one multiprocessor makes the passes' grids 8 blocks, so that blocks walk
// several runs or tiles):
//   values: "x scale" -> "e4m3 e5m2", the codes of fp8(x · scale)
//   scale:  "amax previous margin" (margin decimal) -> "s4 inv4 s5 inv5", pow2Scale for e4m3
//           and e5m2 and the inverses
//   quantize rows cols format scaling layout historyLen margin dtype offset: meta (historyLen
//           + 2 values) then x (rows · cols values; bf16: the upper 16 bits) -> meta, then the
//           codes of out (layout rows or both), then of outT (cols or both); x, out and outT start
//           `offset` elements into their buffers (unaligned views); an output the layout does
//           not write is an empty one
//   scale_update sites historyLen format margin: meta -> meta
//
//   g++ -std=c++17 -O2 -fno-strict-aliasing -DWARP_EMULATOR -I/usr/local/cuda/include -Itests/cuda_emu \
//       tests/cuda_emu/fp8_check.cc -L/usr/local/cuda/lib64 -lcudart -o /tmp/fp8_check
#include "warp_emu.h"

#include "../../cuda/quantize_fp8.cu"
#include "../../cuda/fp8_scale_update.cu"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../../cuda/op.cc"  // the registry and OpCall accessors, as the addon builds them
#include "fp8_check_io.h"

const char* const fp8_check::kProgram = "fp8_check";

namespace {

using mdlm::DType;

using fp8_check::Buffer;
using fp8_check::HostScratch;
using fp8_check::read_hex;

mdlm::OpCall make_call(const char* op, HostScratch& scratch, const cudaDeviceProp& device) {
  mdlm::OpCall call;
  call.op = op;
  call.scratch = &scratch;
  call.device = &device;
  return call;
}

int quantize(char** argv, const cudaDeviceProp& device) {
  const int64_t rows = std::atoll(argv[0]), cols = std::atoll(argv[1]);
  const std::string format = argv[2], scaling = argv[3], layout = argv[4];
  const int history_len = std::atoi(argv[5]), margin = std::atoi(argv[6]);
  const bool bf16 = std::strcmp(argv[7], "bf16") == 0;
  const size_t offset = std::atoi(argv[8]), n = static_cast<size_t>(rows * cols);
  std::vector<float> meta(history_len + 2);
  for (float& m : meta) m = mdlm::bits_f32(read_hex());
  Buffer<float> xf(n, offset);
  Buffer<uint16_t> xb(n, offset);
  for (size_t i = 0; i < n; i++) {
    const uint32_t b = read_hex();
    if (bf16) xb.ptr()[i] = static_cast<uint16_t>(b >> 16);
    else xf.ptr()[i] = mdlm::bits_f32(b);
  }
  const bool plain = layout != "cols", transposed = layout != "rows";
  Buffer<uint8_t> out(plain ? n : 0, offset), out_t(transposed ? n : 0, offset);
  HostScratch scratch;
  mdlm::OpCall call = make_call("quantize_fp8", scratch, device);
  call.nums = {{"rows", rows}, {"cols", cols}, {"historyLen", history_len}, {"margin", margin}};
  call.strs = {{"format", format}, {"scaling", scaling}, {"layout", layout}};
  const DType fp8 = format == "e4m3" ? DType::fp8e4m3 : DType::fp8e5m2;
  call.args["x"] = {bf16 ? static_cast<void*>(xb.ptr()) : static_cast<void*>(xf.ptr()), bf16 ? DType::bf16 : DType::f32, static_cast<int64_t>(n)};
  call.args["meta"] = {meta.data(), DType::f32, history_len + 2};
  call.args["out"] = {out.ptr(), fp8, plain ? static_cast<int64_t>(n) : 0};
  call.args["outT"] = {out_t.ptr(), fp8, transposed ? static_cast<int64_t>(n) : 0};
  mdlm::find_launcher("quantize_fp8")(call);
  for (float m : meta) std::printf("%x\n", mdlm::f32_bits(m));
  if (plain) for (size_t i = 0; i < n; i++) std::printf("%x\n", out.ptr()[i]);
  if (transposed) for (size_t i = 0; i < n; i++) std::printf("%x\n", out_t.ptr()[i]);
  return 0;
}

int scale_update(char** argv, const cudaDeviceProp& device) {
  const int64_t sites = std::atoll(argv[0]);
  const int history_len = std::atoi(argv[1]), margin = std::atoi(argv[3]);
  std::vector<float> meta(static_cast<size_t>(sites) * (history_len + 2));
  for (float& m : meta) m = mdlm::bits_f32(read_hex());
  HostScratch scratch;
  mdlm::OpCall call = make_call("fp8_scale_update", scratch, device);
  call.nums = {{"sites", sites}, {"historyLen", history_len}, {"margin", margin}};
  call.strs = {{"format", argv[2]}};
  call.args["meta"] = {meta.data(), DType::f32, static_cast<int64_t>(meta.size())};
  mdlm::find_launcher("fp8_scale_update")(call);
  for (float m : meta) std::printf("%x\n", mdlm::f32_bits(m));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace mdlm;
  const std::string mode = argc > 1 ? argv[1] : "";
  cudaDeviceProp device{};
  device.multiProcessorCount = 1;
  device.major = 9;
  if (mode == "values") {
    unsigned x, s;
    while (std::scanf("%x %x", &x, &s) == 2) {
      std::printf("%x %x\n", quantize_fp8<Fp8::e4m3>(bits_f32(x), bits_f32(s)), quantize_fp8<Fp8::e5m2>(bits_f32(x), bits_f32(s)));
    }
    return 0;
  }
  if (mode == "scale") {
    unsigned a, p;
    int margin;
    while (std::scanf("%x %x %d", &a, &p, &margin) == 3) {
      const float s4 = pow2_scale(bits_f32(a), fp8_max_exp(Fp8::e4m3), margin, bits_f32(p));
      const float s5 = pow2_scale(bits_f32(a), fp8_max_exp(Fp8::e5m2), margin, bits_f32(p));
      std::printf("%x %x %x %x\n", f32_bits(s4), f32_bits(inverse_pow2(s4)), f32_bits(s5), f32_bits(inverse_pow2(s5)));
    }
    return 0;
  }
  if (mode == "quantize" && argc == 11) return quantize(argv + 2, device);
  if (mode == "scale_update" && argc == 6) return scale_update(argv + 2, device);
  std::fprintf(stderr,
               "usage: fp8_check values | scale | quantize rows cols format scaling layout historyLen margin dtype offset | "
               "scale_update sites historyLen format margin\n");
  return 2;
}
