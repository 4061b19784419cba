// Runs cuda/cross_entropy.cu's cross_entropy_fused on the CPU through the warp emulator
// (tests/cuda_emu/warp_emu.h) and compares loss, lse and dlogits with a float64 reference on the same
// rounded inputs (src/ops/cross_entropy.ts's semantics: ignored rows, zero weights, a dominant
// target), relative error ‖got − want‖ / ‖want‖ per output: cross_entropy_fused_kernel, a block a
// row (the emulator runs the blocks one at a time), on several rows, aligned and unaligned, a
// GPT-2 vocabulary, bf16 and f32, out of place and in place (dlogits over the logits).
//
//   g++ -std=c++17 -O2 -fno-strict-aliasing -DWARP_EMULATOR -I/usr/local/cuda/include -Itests/cuda_emu \
//       tests/cuda_emu/cross_entropy_check.cc -L/usr/local/cuda/lib64 -lcudart -o /tmp/cross_entropy_check \
//       && /tmp/cross_entropy_check   (cudart only for op.cc's error names; no GPU needed)
//
// Exits non-zero when an error is over the registry's tolerance (tests/cuda_build.test.ts runs it
// in CI, also under EMU_SCHEDULE=skewed and EMU_SCHEDULE=random:<seed>).
#include "../../cuda/cross_entropy.cu"

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "../../cuda/op.cc"  // the registry and OpCall accessors, as the addon builds them

namespace {

using mdlm::DType;
using Vec = std::vector<double>;

struct Case {
  const char* label;
  int rows, vocab;
  DType dt;
  bool in_place;
};

// Storage of n values in dt (bf16 or f32), 16-byte aligned.
struct Buf {
  DType dt;
  std::vector<float> f32;
  std::vector<__nv_bfloat16> b16;
  Buf(DType d, const Vec& v) : dt(d) {
    if (dt == DType::bf16) {
      for (double x : v) b16.push_back(__float2bfloat16_rn(static_cast<float>(x)));
    } else {
      f32.assign(v.begin(), v.end());
    }
  }
  void* ptr() { return dt == DType::bf16 ? static_cast<void*>(b16.data()) : static_cast<void*>(f32.data()); }
  Vec read() const {
    Vec out;
    if (dt == DType::bf16) {
      for (auto x : b16) out.push_back(__bfloat162float(x));
    } else {
      out.assign(f32.begin(), f32.end());
    }
    return out;
  }
};

double rel_err(const Vec& got, const Vec& want) {
  double e = 0, w = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    e += (got[i] - want[i]) * (got[i] - want[i]), w += want[i] * want[i];
  }
  return w > 0 ? std::sqrt(e / w) : std::sqrt(e);
}

// One case: relative error of the worst output, named in `worst`.
double run_case(const Case& c, std::string& worst) {
  std::mt19937_64 rng(17 + c.rows * 31 + c.vocab);
  std::normal_distribution<double> normal(0, 2);  // peaked softmaxes, as the registry samples them
  const size_t n = static_cast<size_t>(c.rows) * c.vocab;
  Vec logits(n);
  for (double& x : logits) x = normal(rng);
  std::vector<int> targets(c.rows);
  std::vector<float> weights(c.rows), dloss(c.rows);
  for (int r = 0; r < c.rows; ++r) {
    targets[r] = rng() % 5 == 0 ? -1 : static_cast<int>(rng() % c.vocab);
    weights[r] = rng() % 7 == 0 ? 0.f : static_cast<float>(0.5 + (rng() % 1000) / 1000.0);
    dloss[r] = static_cast<float>(normal(rng));
  }
  // Row 1's target dominates (s near 1: log s small, the target's gradient all of it).
  if (c.rows > 1) {
    targets[1] = 1 % c.vocab;
    logits[static_cast<size_t>(c.vocab) + targets[1]] = 14;
  }
  Buf blogits(c.dt, logits);
  const Vec x = blogits.read();  // the inputs as stored
  Vec loss_ref(c.rows), lse_ref(c.rows), dl_ref(n, 0.0);
  for (int r = 0; r < c.rows; ++r) {
    const double* row = x.data() + static_cast<size_t>(r) * c.vocab;
    double m = -INFINITY, s = 0;
    for (int j = 0; j < c.vocab; ++j) m = std::max(m, row[j]);
    for (int j = 0; j < c.vocab; ++j) s += std::exp(row[j] - m);
    const double lse = m + std::log(s);
    const int t = targets[r];
    lse_ref[r] = lse;
    loss_ref[r] = t < 0 ? 0 : weights[r] * (lse - row[t]);
    for (int j = 0; j < c.vocab && t >= 0; ++j) {
      dl_ref[static_cast<size_t>(r) * c.vocab + j] = static_cast<double>(dloss[r]) * weights[r] * (std::exp(row[j] - lse) - (j == t ? 1 : 0));
    }
  }
  Buf bdl(c.dt, Vec(n, NAN));
  std::vector<float> loss(c.rows, NAN), lse(c.rows, NAN);
  Buf& out = c.in_place ? blogits : bdl;
  mdlm::OpCall call;
  call.op = "cross_entropy_fused";
  call.nums = {{"rows", c.rows}, {"vocab", c.vocab}};
  call.args["logits"] = {blogits.ptr(), c.dt, static_cast<int64_t>(n)};
  call.args["targets"] = {targets.data(), DType::i32, c.rows};
  call.args["weights"] = {weights.data(), DType::f32, c.rows};
  call.args["dloss"] = {dloss.data(), DType::f32, c.rows};
  call.args["loss"] = {loss.data(), DType::f32, c.rows};
  call.args["lse"] = {lse.data(), DType::f32, c.rows};
  call.args["dlogits"] = {out.ptr(), c.dt, static_cast<int64_t>(n)};
  mdlm::find_launcher("cross_entropy_fused")(call);
  const double el = rel_err(Vec(loss.begin(), loss.end()), loss_ref), es = rel_err(Vec(lse.begin(), lse.end()), lse_ref), ed = rel_err(out.read(), dl_ref);
  worst = el >= es && el >= ed ? "loss" : es >= ed ? "lse" : "dlogits";
  return std::max({el, es, ed});
}

}  // namespace

int main() {
  const Case cases[] = {
      {"7x1024 bf16", 7, 1024, DType::bf16, false},
      {"in place: 8x1040 bf16", 8, 1040, DType::bf16, true},
      {"5x50304 bf16 (a GPT-2 vocabulary)", 5, 50304, DType::bf16, false},
      {"6x1003 bf16 (unaligned rows)", 6, 1003, DType::bf16, false},
      {"in place: 5x1024 f32", 5, 1024, DType::f32, true},
  };
  int failed = 0;
  for (const Case& c : cases) {
    std::string worst;
    const double rel = run_case(c, worst);
    // The registry's tolerances (src/ops/cross_entropy.ts): f32 1e-5, bf16 output rounding 4e-3.
    const bool ok = rel <= (c.dt == DType::bf16 ? 4e-3 : 1e-5);
    failed += !ok;
    std::printf("%-52s rel err %.3e (%s)%s\n", c.label, rel, worst.c_str(), ok ? "  ok" : "  FAIL");
    std::fflush(stdout);
  }
  return failed ? 1 : 0;
}
