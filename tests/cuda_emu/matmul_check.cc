// Runs cuda/gemm/gemm_ws.cuh's kernels, in every form the ops launch, on the CPU through the warp
// emulator (tests/cuda_emu/warp_emu.h) and compares their outputs with float64: the rope epilogue
// (the product turned by rope in float64, with the angles' table the kernel reads) in both of its
// schedules, SwiGLU's forward in both of its forms and SwiGLU's backward; relative error
// ‖out − ref‖ / ‖ref‖ per case, and every element of the outputs outside the product (the gap
// between rows when their stride is wider) still holding its NaN poison.
//
//   g++ -std=c++17 -O2 -fno-strict-aliasing -DWARP_EMULATOR -I/usr/local/cuda/include -Itests/cuda_emu \
//       tests/cuda_emu/matmul_check.cc -L/usr/local/cuda/lib64 -lcudart -o /tmp/matmul_check && /tmp/matmul_check
//
// Exits non-zero when a case is over tolerance or wrote outside the product (tests/cuda_build.test.ts
// runs it in CI, also under EMU_SCHEDULE=skewed EMU_CP_ASYNC=eager and EMU_SCHEDULE=random:<seed>).
#include "../../cuda/gemm/gemm_ws.cuh"

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

namespace {

// A q/k projection: out [m][split] and out2 [m][n − split], heads of rope_d columns.
struct Case {
  const char* label;
  int batch, m, n, k, pad;  // pad: elements between out's rows beyond n
  int rope_d;
  int split;
};

using mdlm::gemm::bf16;

// `count` standard normal values rounded to bf16.
std::vector<bf16> normal_bf16(std::mt19937_64& rng, size_t count) {
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<bf16> v(count);
  for (auto& x : v) x = __float2bfloat16_rn(normal(rng));
  return v;
}

// The rope epilogue's forms: schedule and tile width (as matmul_rope picks them), and whether the
// staged output tiles leave by TMA stores (where the outputs allow: dense rows).
struct Variant {
  const char* name;
  mdlm::gemm::Schedule sched;
  int tile_n;
  bool tma = false;
};
constexpr Variant kVariants[] = {{"ping 128", mdlm::gemm::kPingPong, 128},
                                 {"coop 256", mdlm::gemm::kCooperative, 256},
                                 {"coop 256 tma", mdlm::gemm::kCooperative, 256, true},
                                 {"ping 128 tma", mdlm::gemm::kPingPong, 128, true}};

// Launches p's kernel as the GPU would, over few blocks so that each walks several tiles: three,
// or fewer with fewer tiles.
void launch(mdlm::gemm::Kernel kernel, const mdlm::gemm::Params& p, size_t smem) {
  ::emu::launch(kernel, dim3(std::min(p.batch * p.tiles_m * p.tiles_n, 3)), mdlm::gemm::kThreads, smem, p);
}

bool run_case(const Case& c, const Variant& v, double& rel) {
  std::mt19937_64 rng(1234 + c.m * 131 + c.n * 17 + c.k);
  auto fill = [&](size_t count) { return normal_bf16(rng, count); };
  const std::vector<bf16> a = fill((size_t)c.batch * c.m * c.k), w = fill((size_t)c.batch * c.n * c.k);
  // Output columns [0, n1) in out, [n1, n) in out2, each with `pad` more a row.
  const int n1 = c.split, n2 = c.n - n1;
  const int64_t ldo = n1 + c.pad, ldo2 = n2 + c.pad;
  const bf16 poison = __float2bfloat16_rn(NAN);
  std::vector<bf16> out((size_t)c.batch * c.m * ldo, poison), out2((size_t)c.m * ldo2, poison);
  mdlm::gemm::Params p{};
  if (const char* err = mdlm::gemm::make_params(p, a.data(), w.data(), out.data(), c.batch, c.m, c.n, c.k, ldo, v.tile_n)) {
    std::printf("%s: %s\n", c.label, err);
    return false;
  }
  // Rope: positions restart at random (packed documents), up to 300.
  const int max_pos = 300, half = c.rope_d / 2;
  std::vector<int> positions(c.m);
  std::vector<float2> table((size_t)max_pos * std::max(half, 1));
  for (int i = 0, pos = 0; i < c.m; ++i, ++pos) positions[i] = (pos = (rng() % 50 == 0 || pos >= max_pos) ? 0 : pos);
  // The kernel is given the table's first 40 positions only: later ones (a document runs 50 rows
  // on average) take its computed road (rope_cs_at), which must give the table's bits.
  p.out2 = out2.data(), p.ldo2 = ldo2, p.split = c.split, p.positions = positions.data(), p.rope_cs = table.data();
  p.rope_positions = 40, p.rope_base = 10000.0;
  const int entries = max_pos * half;
  ::emu::launch(mdlm::gemm::make_rope_table, dim3((entries + 255) / 256), 256, 0, table.data(), max_pos, c.rope_d, 10000.0);
  // TMA stores take dense outputs with 16-byte rows; elsewhere the consumers store as before.
  const bool dense = c.pad == 0 && n1 % 8 == 0 && n2 % 8 == 0;
  if (v.tma && mdlm::gemm::use_tma_store(p) != dense) {
    std::printf("%s: TMA stores %s\n", c.label, dense ? "refused a dense output" : "taken for a padded or odd output");
    return false;
  }
  const mdlm::gemm::Kernel kernel = mdlm::gemm::kernel_for(c.rope_d, v.sched, v.tile_n, false);
  if (!kernel) {
    std::printf("%s: no kernel for rope head dim %d\n", c.label, c.rope_d);
    return false;
  }
  launch(kernel, p, mdlm::gemm::smem_bytes(v.tile_n, c.rope_d));
  auto product = [&](int b, int i, int j) {
    double r = 0;
    for (int q = 0; q < c.k; ++q) {
      const size_t ai = ((size_t)b * c.m + i) * c.k + q;
      r += (double)__bfloat162float(a[ai]) * __bfloat162float(w[((size_t)b * c.n + j) * c.k + q]);
    }
    return r;
  };
  double err2 = 0, ref2 = 0;
  bool gaps_poisoned = true;
  for (int b = 0; b < c.batch; ++b)
    for (int i = 0; i < c.m; ++i) {
      std::vector<double> ref(c.n);
      for (int j = 0; j < c.n; ++j) ref[j] = product(b, i, j);
      for (int j = 0; j < c.n; ++j) {  // turn each head's low half and its partner
        const int e = j % c.rope_d;
        if (e >= half) continue;
        const float2 cs = table[(size_t)positions[i] * half + e];
        const double lo = ref[j], hi = ref[j + half];
        ref[j] = lo * cs.x - hi * cs.y;
        ref[j + half] = hi * cs.x + lo * cs.y;
      }
      for (int j = 0; j < c.n; ++j) {
        const bool second = j >= n1;
        const float got = __bfloat162float(second ? out2[(size_t)i * ldo2 + j - n1] : out[((size_t)b * c.m + i) * ldo + j]);
        err2 += (got - ref[j]) * (got - ref[j]);
        ref2 += ref[j] * ref[j];
      }
      for (int j = n1; j < ldo; ++j) gaps_poisoned = gaps_poisoned && std::isnan(__bfloat162float(out[((size_t)b * c.m + i) * ldo + j]));
      for (int j = n2; j < ldo2; ++j) gaps_poisoned = gaps_poisoned && std::isnan(__bfloat162float(out2[(size_t)i * ldo2 + j]));
    }
  rel = std::sqrt(err2 / ref2);
  if (!gaps_poisoned) std::printf("%s: wrote outside the product\n", c.label);
  return gaps_poisoned && rel <= 5e-3;  // bf16 output rounding: about 2^-9 relative
}

// The SwiGLU forward (`epilogue`: kSwiglu or kSwigluDeep, ping-pong only): G and U of [Gᵀ; Uᵀ] =
// Wgu · xᵀ, and h = silu(G)·U, against float64 products rounded to bf16 as the kernel rounds
// them; the relative error of the worst of the three. With tma, by TMA stores where the rows
// allow them (rows a multiple of 8).
bool run_swiglu(int epilogue, int F, int rows, int d, bool tma, double& rel) {
  std::mt19937_64 rng(99 + F * 7 + rows * 3 + d);
  auto fill = [&](size_t count) { return normal_bf16(rng, count); };
  const std::vector<bf16> wgu = fill((size_t)2 * F * d), x = fill((size_t)rows * d);
  const bf16 poison = __float2bfloat16_rn(NAN);
  std::vector<bf16> gu((size_t)2 * F * rows, poison), h((size_t)F * rows, poison);
  mdlm::gemm::Params p{};
  if (const char* err = mdlm::gemm::make_swiglu_params(p, wgu.data(), x.data(), gu.data(), h.data(), F, rows, d)) {
    std::printf("swiglu: %s\n", err);
    return false;
  }
  if (tma && mdlm::gemm::use_tma_store(p) != (rows % 8 == 0)) {
    std::printf("swiglu: use_tma_store disagrees with the layout\n");
    return false;
  }
  launch(mdlm::gemm::kernel_for(epilogue, mdlm::gemm::kPingPong, 128, false), p, mdlm::gemm::smem_bytes(128, epilogue));
  auto dot = [&](int row, int t) {
    double r = 0;
    for (int q = 0; q < d; ++q) r += (double)__bfloat162float(wgu[(size_t)row * d + q]) * __bfloat162float(x[(size_t)t * d + q]);
    return r;
  };
  auto round = [](double v) { return (double)__bfloat162float(__float2bfloat16_rn((float)v)); };
  double e2[3] = {0, 0, 0}, r2[3] = {0, 0, 0};
  for (int f = 0; f < F; ++f)
    for (int t = 0; t < rows; ++t) {
      const double g = round(dot(f, t)), u = round(dot(F + f, t));
      const double want[3] = {g, u, g / (1 + std::exp(-g)) * u};
      const double got[3] = {__bfloat162float(gu[(size_t)f * rows + t]), __bfloat162float(gu[(size_t)(F + f) * rows + t]), __bfloat162float(h[(size_t)f * rows + t])};
      for (int i = 0; i < 3; ++i) e2[i] += (got[i] - want[i]) * (got[i] - want[i]), r2[i] += want[i] * want[i];
    }
  rel = 0;
  for (int i = 0; i < 3; ++i) rel = std::max(rel, std::sqrt(e2[i] / r2[i]));
  return rel <= 5e-3;
}

// kSwigluBwd (ping-pong, 128 wide): dh = Wdownᵀ · doutᵀ with Wdown [d][F] (a transposed) and
// dout [rows][d], then dG and dU from dh rounded to bf16 and G, U (random), against float64. A
// guard after dgu must keep its poison.
bool run_swiglu_bwd(int F, int rows, int d, double& rel) {
  std::mt19937_64 rng(7 + F * 5 + rows * 11 + d);
  auto fill = [&](size_t count) { return normal_bf16(rng, count); };
  const std::vector<bf16> wdown = fill((size_t)d * F), dout = fill((size_t)rows * d), gu = fill((size_t)2 * F * rows);
  const size_t guard = (size_t)128 * rows;
  std::vector<bf16> dgu((size_t)2 * F * rows + guard, __float2bfloat16_rn(NAN));
  mdlm::gemm::Params p{};
  if (const char* err = mdlm::gemm::make_swiglu_bwd_params(p, wdown.data(), dout.data(), dgu.data(), gu.data(), F, rows, d)) {
    std::printf("swiglu bwd: %s\n", err);
    return false;
  }
  launch(mdlm::gemm::kernel_for(mdlm::gemm::kSwigluBwd, mdlm::gemm::kPingPong, 128, true), p, mdlm::gemm::smem_bytes(128, mdlm::gemm::kSwigluBwd));
  auto f32 = [](bf16 x) { return (double)__bfloat162float(x); };
  double e2[2] = {0, 0}, r2[2] = {0, 0};
  for (int f = 0; f < F; ++f)
    for (int t = 0; t < rows; ++t) {
      double dh = 0;
      for (int q = 0; q < d; ++q) dh += f32(wdown[(size_t)q * F + f]) * f32(dout[(size_t)t * d + q]);
      dh = __bfloat162float(__float2bfloat16_rn((float)dh));
      const double g = f32(gu[(size_t)f * rows + t]), u = f32(gu[(size_t)(F + f) * rows + t]), s = 1 / (1 + std::exp(-g));
      const double want[2] = {dh * u * (s + g * s * (1 - s)), dh * g * s};
      const double got[2] = {f32(dgu[(size_t)f * rows + t]), f32(dgu[(size_t)(F + f) * rows + t])};
      for (int i = 0; i < 2; ++i) e2[i] += (got[i] - want[i]) * (got[i] - want[i]), r2[i] += want[i] * want[i];
    }
  rel = std::max(std::sqrt(e2[0] / r2[0]), std::sqrt(e2[1] / r2[1]));
  for (size_t i = (size_t)2 * F * rows; i < dgu.size(); ++i) {
    if (!std::isnan(f32(dgu[i]))) {
      std::printf("swiglu bwd: wrote past dgu at element %zu\n", i);
      return false;
    }
  }
  return rel <= 5e-3;
}

}  // namespace

int main() {
  const Case cases[] = {
      {"rope D=64: q 256 + k 128 columns, 300 rows", 1, 300, 384, 96, 8, 64, 256},
      {"rope D=128: q 256 + k 256 columns, 200 rows", 1, 200, 512, 64, 0, 128, 256},
  };
  int failed = 0;
  for (const Case& c : cases) {
    for (const Variant& v : kVariants) {
      double rel = NAN;
      const bool ok = run_case(c, v, rel);
      failed += !ok;
      std::printf("%-64s %-12s rel err %.3e%s\n", c.label, v.name, rel, ok ? "  ok" : "  FAIL");
      std::fflush(stdout);
    }
  }
  // F, rows, d: tails in F and rows; rows 300 take the pair stores, 296 TMA stores with two tiles
  // a warpgroup (12 over 3 blocks), so that a staged tile is written again after its stores.
  const int swiglu_cases[][3] = {{64, 128, 64}, {100, 200, 72}, {256, 300, 136}, {256, 296, 64}};
  for (const int epilogue : {mdlm::gemm::kSwiglu, mdlm::gemm::kSwigluDeep}) {
    for (const auto& c : swiglu_cases) {
      for (const bool tma : {false, true}) {
        double rel = NAN;
        const bool ok = run_swiglu(epilogue, c[0], c[1], c[2], tma, rel);
        failed += !ok;
        char label[96];
        std::snprintf(label, sizeof label, "swiglu%s F=%d rows=%d d=%d", epilogue == mdlm::gemm::kSwigluDeep ? " deep" : "", c[0], c[1], c[2]);
        std::printf("%-64s %-12s rel err %.3e%s\n", label, tma ? "ping 128 tma" : "ping 128", rel, ok ? "  ok" : "  FAIL");
        std::fflush(stdout);
      }
    }
  }
  // F and rows multiples of 8, with tails in both; 3 blocks over more tiles: the slots reused,
  // their mbarriers' phases turning.
  const int swiglu_bwd_cases[][3] = {{104, 200, 72}, {256, 296, 136}, {392, 520, 64}};
  for (const auto& c : swiglu_bwd_cases) {
    double rel = NAN;
    const bool ok = run_swiglu_bwd(c[0], c[1], c[2], rel);
    failed += !ok;
    char label[96];
    std::snprintf(label, sizeof label, "swiglu backward F=%d rows=%d d=%d", c[0], c[1], c[2]);
    std::printf("%-64s %-12s rel err %.3e%s\n", label, "ping 128 tma", rel, ok ? "  ok" : "  FAIL");
    std::fflush(stdout);
  }
  return failed ? 1 : 0;
}
