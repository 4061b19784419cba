// Host build of cuda/convert.cuh and cuda/philox.cuh for tests/cuda_build.test.ts, which compares
// its output with src/convert.ts and src/rng/philox.ts: the kernels' bit-exact arithmetic checked
// without a GPU.
//   encode: stdin f32 bit patterns (hex) -> "bf16 f16 e4m3 e5m2" codes (hex), a line each
//   decode: every bf16/f16 code, then every fp8 code -> f32 bits (hex)
//   philox: stdin "c0 c1 c2 c3 k0 k1" -> the block's four words
#include <cstdio>
#include <cstring>

#include "convert.cuh"
#include "philox.cuh"

using namespace mdlm;

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "";
  if (std::strcmp(mode, "encode") == 0) {
    unsigned b;
    while (std::scanf("%x", &b) == 1) {
      const float x = bits_f32(b);
      std::printf("%x %x %x %x\n", f32_to_bf16(x), F16::encode(x), E4M3::encode(x), E5M2::encode(x));
    }
  } else if (std::strcmp(mode, "decode") == 0) {
    for (uint32_t c = 0; c < 65536; c++) std::printf("%x %x\n", f32_bits(bf16_to_f32(static_cast<uint16_t>(c))), f32_bits(F16::decode(c)));
    for (uint32_t c = 0; c < 256; c++) std::printf("%x %x\n", f32_bits(E4M3::decode(c)), f32_bits(E5M2::decode(c)));
  } else if (std::strcmp(mode, "philox") == 0) {
    unsigned c0, c1, c2, c3, k0, k1;
    while (std::scanf("%u %u %u %u %u %u", &c0, &c1, &c2, &c3, &k0, &k1) == 6) {
      const uint4 r = philox4x32(make_uint4(c0, c1, c2, c3), make_uint2(k0, k1));
      std::printf("%u %u %u %u\n", r.x, r.y, r.z, r.w);
    }
  } else {
    std::fprintf(stderr, "usage: cuda_host_check encode|decode|philox\n");
    return 2;
  }
  return 0;
}
