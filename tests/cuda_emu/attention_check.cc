// Runs cuda/attention/attention.cu on the CPU through the warp emulator (warp_emu.h) and compares
// every output with a float64 reference (a port of src/ops/attention.ts), the way the parity
// harness does: inputs rounded to the storage dtype, outputs poisoned with NaN, relative error
// ‖out − ref‖ / ‖ref‖ per output. Covers the op's test cases and multi-tile cases (several query
// and key tiles, tails, documents, GQA, unsorted document ids) in f32 and bf16.
//
//   g++ -std=c++17 -O2 -fno-strict-aliasing -DWARP_EMULATOR -I/usr/local/cuda/include -Itests/cuda_emu \
//       tests/cuda_emu/attention_check.cc -L/usr/local/cuda/lib64 -lcudart -o /tmp/attention_check \
//       && /tmp/attention_check [filter]   (cudart only for op.cc's error names; no GPU needed)
//
// The filter runs the cases whose label contains it, or any of its '|'-separated parts; a part
// that starts with '-' leaves out the cases whose label contains the rest of it.
//
// Each case runs the forward, the default backward and the deterministic one (the op's
// `deterministic` attribute). Exits non-zero when any error is over the registry's tolerance
// (tests/cuda_build.test.ts runs it, again with HOPPER_KERNELS=0 for the mma.sync kernels that
// GPUs before Hopper run (the kernel settings' hopper_kernels), with EMU_SCHEDULE=skewed
// EMU_CP_ASYNC=eager, which expose shared-memory races, and with EMU_SCHEDULE=random:<seed>,
// which holds one slow thread back: barrier-order races; warp_emu.h). The emulator's launches
// take tile groups of 4 rows (attention.cu's group_rows), so the multi-tile cases end in a
// partial group.
// GRAD_STRIDE_EXTRA=n writes dQ, dK and dV with their tokens H·D + n elements apart (the op's
// gradStride), the gaps checked to stay poisoned; ROPE=base turns dQ and dK back through rope at
// random packed positions (the op's ropeBase; cases whose head dim is a multiple of 8), checked
// against the reference's turn. FUZZ=n runs n random cases instead (fuzz_cases; FUZZ_SEED picks them).
#include "../../cuda/attention/attention.cu"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "../../cuda/op.cc"  // the registry and OpCall accessors, as the addon builds them

namespace {

struct HostScratch : mdlm::Scratch {
  std::vector<std::vector<unsigned char>> blocks;
  void* last = nullptr;
  void* get(size_t bytes) override {
    blocks.emplace_back(bytes + 256);
    auto p = reinterpret_cast<uintptr_t>(blocks.back().data());
    last = reinterpret_cast<void*>((p + 255) & ~uintptr_t(255));
    std::memset(last, 0xff, bytes);  // poisoned like fresh device memory could be
    return last;
  }
};

struct Case {
  std::string label;
  int B, T, H, G, D;
  bool causal;
  bool random_ids = false;  // unsorted document ids
  int cut = 0;              // > 0: every row two documents, the second from row `cut`
  double q_scale = 1;       // q's values times this: scores whose row maxima move far between key tiles
  int max_docs = 0;         // > 0: 1 to max_docs documents a row (random cuts) instead of 1 + row % 3
};

using Vec = std::vector<double>;

float round_bf16(double x) { return __bfloat162float(__float2bfloat16_rn(static_cast<float>(x))); }

struct Ref {
  const Case& c;
  double scale;
  const std::vector<int>& seg;
  size_t qi(int b, int t, int h) const { return ((size_t(b) * c.T + t) * c.H + h) * c.D; }
  size_t ki(int b, int t, int g) const { return ((size_t(b) * c.T + t) * c.G + g) * c.D; }
  bool vis(int b, int i, int j) const { return (!c.causal || j <= i) && seg[b * c.T + i] == seg[b * c.T + j]; }
  Vec scores(const Vec& q, const Vec& k, int b, int h, int i) const {
    const int g = h / (c.H / c.G);
    Vec s(c.T);
    for (int j = 0; j < c.T; ++j) {
      if (!vis(b, i, j)) {
        s[j] = -INFINITY;
        continue;
      }
      double dot = 0;
      for (int d = 0; d < c.D; ++d) dot += q[qi(b, i, h) + d] * k[ki(b, j, g) + d];
      s[j] = dot * scale;
    }
    return s;
  }
  void forward(const Vec& q, const Vec& k, const Vec& v, Vec& out, Vec& lse) const {
    out.assign(size_t(c.B) * c.T * c.H * c.D, 0);
    lse.assign(size_t(c.B) * c.H * c.T, 0);
    for (int b = 0; b < c.B; ++b)
      for (int h = 0; h < c.H; ++h) {
        const int g = h / (c.H / c.G);
        for (int i = 0; i < c.T; ++i) {
          Vec s = scores(q, k, b, h, i);
          double m = -INFINITY;
          for (double x : s) m = std::max(m, x);
          double sum = 0;
          for (double x : s) sum += std::exp(x - m);
          const double l = m + std::log(sum);
          lse[(size_t(b) * c.H + h) * c.T + i] = l;
          // out_i = Σ_j p_ij v_j, each element summed over j in order; each p_ij taken once
          double* o = &out[qi(b, i, h)];
          for (int j = 0; j < c.T; ++j) {
            const double p = std::exp(s[j] - l);
            const double* vj = &v[ki(b, j, g)];
            for (int d = 0; d < c.D; ++d) o[d] += p * vj[d];
          }
        }
      }
  }
  void backward(const Vec& q, const Vec& k, const Vec& v, const Vec& out, const Vec& lse, const Vec& dout, Vec& dq, Vec& dk,
                Vec& dv) const {
    dq.assign(q.size(), 0);
    dk.assign(k.size(), 0);
    dv.assign(v.size(), 0);
    for (int b = 0; b < c.B; ++b)
      for (int h = 0; h < c.H; ++h) {
        const int g = h / (c.H / c.G);
        for (int i = 0; i < c.T; ++i) {
          Vec s = scores(q, k, b, h, i);
          const double l = lse[(size_t(b) * c.H + h) * c.T + i];
          const size_t qo = qi(b, i, h);
          double drow = 0;
          for (int d = 0; d < c.D; ++d) drow += dout[qo + d] * out[qo + d];
          for (int j = 0; j < c.T; ++j) {
            const double p = std::exp(s[j] - l);
            if (p == 0) continue;
            const size_t ko = ki(b, j, g);
            double dp = 0;
            for (int d = 0; d < c.D; ++d) dp += dout[qo + d] * v[ko + d];
            const double ds = p * (dp - drow);
            for (int d = 0; d < c.D; ++d) {
              dq[qo + d] += ds * k[ko + d] * scale;
              dk[ko + d] += ds * q[qo + d] * scale;
              dv[ko + d] += p * dout[qo + d];
            }
          }
        }
      }
  }
};

// A device (host) buffer of the storage dtype.
struct Buf {
  mdlm::DType dtype;
  std::vector<unsigned char> bytes;
  size_t n;
  Buf(mdlm::DType d, size_t count, bool poison) : dtype(d), n(count) {
    const size_t es = d == mdlm::DType::bf16 ? 2 : 4;
    bytes.assign(n * es + 64, 0);
    if (poison) std::memset(bytes.data(), 0xff, bytes.size());  // NaN in f32 and bf16
  }
  void* ptr() { return bytes.data(); }
  static Buf of(mdlm::DType d, const Vec& v) {
    Buf b(d, v.size(), false);
    for (size_t i = 0; i < v.size(); ++i) {
      if (d == mdlm::DType::bf16) {
        __nv_bfloat16 x = __float2bfloat16_rn(static_cast<float>(v[i]));
        std::memcpy(b.bytes.data() + 2 * i, &x, 2);
      } else {
        float x = static_cast<float>(v[i]);
        std::memcpy(b.bytes.data() + 4 * i, &x, 4);
      }
    }
    return b;
  }
  Vec read() const {
    Vec v(n);
    for (size_t i = 0; i < n; ++i) {
      if (dtype == mdlm::DType::bf16) {
        __nv_bfloat16 x;
        std::memcpy(&x, bytes.data() + 2 * i, 2);
        v[i] = __bfloat162float(x);
      } else {
        float x;
        std::memcpy(&x, bytes.data() + 4 * i, 4);
        v[i] = x;
      }
    }
    return v;
  }
};

double rel_err(const Vec& got, const Vec& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i]) && got[i] != want[i]) return INFINITY;
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

Vec randn(std::mt19937_64& rng, size_t n) {
  std::normal_distribution<double> nd;
  Vec v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

std::vector<int> seg_ids(std::mt19937_64& rng, const Case& c) {
  std::vector<int> seg(size_t(c.B) * c.T);
  for (int b = 0; b < c.B; ++b) {
    if (c.cut > 0) {
      for (int t = 0; t < c.T; ++t) seg[b * c.T + t] = t < c.cut ? 0 : 1;
      continue;
    }
    if (c.random_ids) {
      for (int t = 0; t < c.T; ++t) seg[b * c.T + t] = static_cast<int>(rng() % 3);
      continue;
    }
    const int docs = std::min(c.max_docs > 0 ? 1 + static_cast<int>(rng() % c.max_docs) : 1 + b % 3, c.T);
    std::vector<int> cuts;
    while ((int)cuts.size() < docs - 1) {
      const int x = 1 + static_cast<int>(rng() % (c.T - 1));
      if (std::find(cuts.begin(), cuts.end(), x) == cuts.end()) cuts.push_back(x);
    }
    int id = static_cast<int>(rng() % 4);
    for (int t = 0; t < c.T; ++t) {
      if (std::find(cuts.begin(), cuts.end(), t) != cuts.end()) ++id;
      seg[b * c.T + t] = id;
    }
  }
  return seg;
}

Vec rounded(const Vec& v, mdlm::DType d) {
  Vec r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = d == mdlm::DType::bf16 ? round_bf16(v[i]) : static_cast<float>(v[i]);
  return r;
}

mdlm::OpCall make_call(const std::string& op, const Case& c, double scale) {
  mdlm::OpCall call;
  call.op = op;
  // HOPPER_KERNELS=0: the kernels GPUs before Hopper run.
  const char* hopper = getenv("HOPPER_KERNELS");
  call.settings.hopper_kernels = !hopper || std::string(hopper) != "0";
  call.nums = {{"batch", c.B}, {"seqLen", c.T}, {"heads", c.H}, {"kvHeads", c.G}, {"headDim", c.D}, {"causal", c.causal ? 1 : 0}, {"scale", scale}};
  return call;
}

struct Result {
  double fwd, bwd, bwd_det;  // bwd: the default (fused) backward; bwd_det: deterministic
  std::string worst_fwd, worst_bwd, worst_bwd_det;
};

Result run_case(const Case& c, mdlm::DType dt, uint64_t seed) {
  using mdlm::DType;
  std::mt19937_64 rng(seed);
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.D));
  const size_t nq = size_t(c.B) * c.T * c.H * c.D, nk = size_t(c.B) * c.T * c.G * c.D, nr = size_t(c.B) * c.H * c.T;
  Vec q = randn(rng, nq), k = rounded(randn(rng, nk), dt), v = rounded(randn(rng, nk), dt);
  for (auto& x : q) x *= c.q_scale;
  q = rounded(q, dt);
  std::vector<int> seg = seg_ids(rng, c);
  Ref ref{c, scale, seg};
  Result r{};

  // forward
  Vec out_ref, lse_ref;
  ref.forward(q, k, v, out_ref, lse_ref);
  {
    Buf bq = Buf::of(dt, q), bk = Buf::of(dt, k), bv = Buf::of(dt, v);
    Buf bout(dt, nq, true), blse(DType::f32, nr, true);
    mdlm::OpCall call = make_call("attention", c, scale);
    call.args["q"] = {bq.ptr(), dt, (int64_t)nq};
    call.args["k"] = {bk.ptr(), dt, (int64_t)nk};
    call.args["v"] = {bv.ptr(), dt, (int64_t)nk};
    call.args["segIds"] = {seg.data(), DType::i32, (int64_t)seg.size()};
    call.args["out"] = {bout.ptr(), dt, (int64_t)nq};
    call.args["lse"] = {blse.ptr(), DType::f32, (int64_t)nr};
    HostScratch scratch;
    call.scratch = &scratch;
    mdlm::find_launcher("attention")(call);
    const double eo = rel_err(bout.read(), out_ref), el = rel_err(blse.read(), lse_ref);
    r.fwd = std::max(eo, el);
    r.worst_fwd = eo >= el ? "out" : "lse";
  }
  // backward, with out and lse from the reference rounded to their storage dtypes (as the
  // harness samples them)
  {
    Vec out = rounded(out_ref, dt), lse = rounded(lse_ref, DType::f32), dout = rounded(randn(rng, nq), dt);
    Vec dq_ref, dk_ref, dv_ref;
    ref.backward(q, k, v, out, lse, dout, dq_ref, dk_ref, dv_ref);
    // ROPE=base: q and k came from rope at packed positions (restarting with probability 1/32);
    // the gradients of rope's inputs are dq and dk turned by −θ, θ as rope computes it
    const double rope_base = getenv("ROPE") && c.D % 8 == 0 ? std::atof(getenv("ROPE")) : 0;  // (rope: head dims of 8s)
    std::vector<int> positions(size_t(c.B) * c.T);
    for (int b = 0; b < c.B; ++b) {
      int pos = static_cast<int>(rng() % 4096);
      for (int t = 0; t < c.T; ++t) positions[size_t(b) * c.T + t] = pos = t == 0 ? pos : rng() % 32 == 0 ? 0 : pos + 1;
    }
    if (rope_base > 0) {
      for (auto [g, heads] : {std::pair<Vec*, int>{&dq_ref, c.H}, {&dk_ref, c.G}})
        for (size_t n = 0; n < positions.size(); ++n)
          for (int h = 0; h < heads; ++h)
            for (int i = 0; i < c.D / 2; ++i) {
              const float angle = static_cast<float>(positions[n]) * static_cast<float>(std::pow(rope_base, -2.0 * i / c.D));
              double& lo = (*g)[(n * heads + h) * c.D + i];
              double& up = (*g)[(n * heads + h) * c.D + i + c.D / 2];
              const double x1 = lo, x2 = up, co = std::cos(angle), si = std::sin(angle);
              lo = x1 * co + x2 * si;
              up = x2 * co - x1 * si;
            }
    }
    Buf bq = Buf::of(dt, q), bk = Buf::of(dt, k), bv = Buf::of(dt, v), bo = Buf::of(dt, out), bl = Buf::of(DType::f32, lse),
        bdo = Buf::of(dt, dout);
    // GRAD_STRIDE_EXTRA=n: the gradients' tokens H·D + n elements apart (gradStride, as the parts
    // of a fused q/k/v gradient), the gaps left poisoned
    const int64_t hd = (int64_t)c.H * c.D, gd = (int64_t)c.G * c.D;
    const int64_t stride = getenv("GRAD_STRIDE_EXTRA") ? hd + std::atoi(getenv("GRAD_STRIDE_EXTRA")) : 0;
    const size_t tokens = size_t(c.B) * c.T;
    const auto span = [&](int64_t width) { return stride ? (tokens - 1) * stride + width : tokens * width; };
    for (bool det : {false, true}) {
      Buf bdq(dt, span(hd), true), bdk(dt, span(gd), true), bdv(dt, span(gd), true);
      mdlm::OpCall call = make_call("attention_backward", c, scale);
      call.nums["deterministic"] = det ? 1 : 0;
      if (stride) call.nums["gradStride"] = static_cast<double>(stride);
      if (rope_base > 0) call.nums["ropeBase"] = rope_base;
      call.args["positions"] = {positions.data(), DType::i32, (int64_t)positions.size()};
      call.args["q"] = {bq.ptr(), dt, (int64_t)nq};
      call.args["k"] = {bk.ptr(), dt, (int64_t)nk};
      call.args["v"] = {bv.ptr(), dt, (int64_t)nk};
      call.args["segIds"] = {seg.data(), DType::i32, (int64_t)seg.size()};
      call.args["out"] = {bo.ptr(), dt, (int64_t)nq};
      call.args["lse"] = {bl.ptr(), DType::f32, (int64_t)nr};
      call.args["dout"] = {bdo.ptr(), dt, (int64_t)nq};
      call.args["dq"] = {bdq.ptr(), dt, (int64_t)span(hd)};
      call.args["dk"] = {bdk.ptr(), dt, (int64_t)span(gd)};
      call.args["dv"] = {bdv.ptr(), dt, (int64_t)span(gd)};
      HostScratch scratch;
      call.scratch = &scratch;
      mdlm::find_launcher("attention_backward")(call);
      if (getenv("VERBOSE")) {  // Drow scratch against Σ dO·O
        const float* ds = static_cast<const float*>(scratch.last);
        double worst = 0;
        for (int b = 0; b < c.B; ++b)
          for (int h = 0; h < c.H; ++h)
            for (int t = 0; t < c.T; ++t) {
              double d = 0;
              for (int e = 0; e < c.D; ++e) d += dout[ref.qi(b, t, h) + e] * out[ref.qi(b, t, h) + e];
              worst = std::max(worst, std::abs(d - ds[(size_t(b) * c.H + h) * c.T + t]));
            }
        std::printf("   Drow max abs err %.3e\n", worst);
    }
    // A gradient's rows out of its strided buffer, and its error; a written gap is an error (infinite)
    const auto err = [&](const Buf& buf, const Vec& want, int64_t width) {
      if (!stride) return rel_err(buf.read(), want);
      const Vec all = buf.read();
      Vec got(tokens * width);
      bool gaps_kept = true;
      for (size_t n = 0; n < tokens; ++n) {
        for (int64_t e = 0; e < width; ++e) got[n * width + e] = all[n * stride + e];
        for (int64_t e = width; e < stride && n + 1 < tokens; ++e) gaps_kept = gaps_kept && std::isnan(all[n * stride + e]);
      }
      return gaps_kept ? rel_err(got, want) : std::numeric_limits<double>::infinity();
    };
    const double eq = err(bdq, dq_ref, hd), ek = err(bdk, dk_ref, gd), ev = err(bdv, dv_ref, gd);
    (det ? r.bwd_det : r.bwd) = std::max({eq, ek, ev});
    if (getenv("VERBOSE")) std::printf("   %s dq %.3e dk %.3e dv %.3e\n", det ? "deterministic" : "fused", eq, ek, ev);
    (det ? r.worst_bwd_det : r.worst_bwd) = eq >= ek && eq >= ev ? "dq" : ek >= ev ? "dk" : "dv";
    }
  }
  return r;
}

// FUZZ=n: n random cases instead of the list, from FUZZ_SEED (default 1): head dims mostly 64 and
// 128 (Hopper's warpgroup kernels), lengths at and around the 64-row tile edges or anywhere up to
// 400, GQA, up to 8 documents a row (some one token long), unsorted ids, a cut, wide scores. A
// case's label is its shape, so a failure can be run again from the list.
std::vector<Case> fuzz_cases(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const auto pick = [&](std::initializer_list<int> xs) { return *(xs.begin() + rng() % xs.size()); };
  std::vector<Case> cases;
  for (int i = 0; i < n; ++i) {
    Case c;
    c.D = rng() % 4 == 0 ? pick({16, 32, 44, 80, 96, 120}) : pick({64, 128});
    c.T = rng() % 2 == 0 ? std::max(1, 64 * (1 + static_cast<int>(rng() % 4)) + pick({-1, 0, 1})) : 1 + static_cast<int>(rng() % 400);
    c.B = 1 + static_cast<int>(rng() % 3);
    c.G = pick({1, 2, 4});
    c.H = c.G * pick({1, 2, 4});
    c.causal = rng() % 2 == 0;
    const int layout = static_cast<int>(rng() % 5);
    if (layout == 0) c.random_ids = true;
    else if (layout == 1 && c.T > 1) c.cut = 1 + static_cast<int>(rng() % (c.T - 1));
    else if (layout == 2) c.max_docs = 8;
    if (rng() % 4 == 0) c.q_scale = 6;
    char label[160];
    std::snprintf(label, sizeof label, "fuzz %d: B%d T%d H%d/%d D%d %s%s%s%s", i, c.B, c.T, c.H, c.G, c.D, c.causal ? "causal" : "bidir",
                  c.random_ids ? " random ids" : "", c.cut ? (" cut " + std::to_string(c.cut)).c_str() : "", c.max_docs ? " docs<=8" : "");
    c.label = std::string(label) + (c.q_scale != 1 ? " wide" : "");
    cases.push_back(c);
  }
  return cases;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string filter = argc > 1 ? argv[1] : "";
  std::vector<std::string> take, leave;
  for (size_t at = 0; at <= filter.size();) {
    const size_t bar = std::min(filter.find('|', at), filter.size());
    if (filter[at] == '-' && bar > at + 1) leave.push_back(filter.substr(at + 1, bar - at - 1));
    else if (bar > at) take.push_back(filter.substr(at, bar - at));
    at = bar + 1;
  }
  const auto runs = [&](const std::string& label) {
    const auto in = [&](const std::string& part) { return label.find(part) != std::string::npos; };
    return (take.empty() || std::any_of(take.begin(), take.end(), in)) && std::none_of(leave.begin(), leave.end(), in);
  };
  const int seeds = argc > 2 ? std::atoi(argv[2]) : 1;
  std::vector<Case> cases = {
      // attention.cases('test')
      {"causal T=37 D=16", 2, 37, 2, 2, 16, true},
      {"bidirectional T=37 D=32", 2, 37, 2, 2, 32, false},
      {"documents causal T=50 D=64", 3, 50, 1, 1, 64, true},
      {"documents bidirectional T=29 D=16", 3, 29, 2, 2, 16, false},
      {"gqa 4/2 causal T=45 D=32", 1, 45, 4, 2, 32, true},
      {"gqa 4/1 bidirectional T=21 D=64", 2, 21, 4, 1, 64, false},
      {"short T=5 D=128 causal", 1, 5, 2, 1, 128, true},
      {"D=20 (padded) bidirectional T=19", 2, 19, 2, 2, 20, false},
      // several query and key tiles, tails, documents, GQA
      {"multi D=128 causal gqa 4/2 T=300", 3, 300, 4, 2, 128, true},
      {"multi D=128 bidirectional T=200", 3, 200, 2, 2, 128, false},
      {"multi D=120 (pad 128) causal gqa T=150", 2, 150, 4, 2, 120, true},
      {"multi D=64 causal T=333", 3, 333, 2, 2, 64, true},
      {"multi D=64 bidirectional gqa 4/1 T=260", 3, 260, 4, 1, 64, false},
      {"multi D=96 causal T=170", 2, 170, 2, 1, 96, true},
      {"multi D=80 (pad 96) bidir T=150", 3, 150, 2, 2, 80, false},
      {"multi D=56 (pad 64) bidir gqa T=130", 2, 130, 2, 1, 56, false},
      {"multi D=32 causal T=290", 3, 290, 2, 2, 32, true},
      {"wide scores D=64 bidir T=200", 2, 200, 2, 2, 64, false, false, 0, 6},
      {"wide scores D=128 causal T=260", 2, 260, 2, 1, 128, true, false, 0, 6},
      {"multi D=24 (pad 32) causal T=140", 2, 140, 2, 2, 24, true},
      {"multi D=44 (simt) causal T=90", 2, 90, 2, 1, 44, true},
      {"random ids D=64 causal T=200", 2, 200, 2, 1, 64, true, true},
      {"random ids D=128 bidir T=150", 2, 150, 2, 2, 128, false, true},
      // a document boundary in the second half of a 64-query tile (rows 128..191), under whole
      // 128-key blocks of one document: a tile classified from its first 32 rows would be full
      {"cut at 170 D=128 bidir T=256", 2, 256, 2, 2, 128, false, false, 170},
  };
  if (const char* fuzz = getenv("FUZZ")) cases = fuzz_cases(std::atoi(fuzz), getenv("FUZZ_SEED") ? std::strtoull(getenv("FUZZ_SEED"), nullptr, 10) : 1);
  std::printf("%-40s %-5s %12s %5s %12s %5s %12s %5s\n", "case", "dtype", "fwd relerr", "worst", "bwd relerr", "worst", "det relerr", "worst");
  int failed = 0;
  for (const Case& c : cases) {
    if (!runs(c.label)) continue;
    for (mdlm::DType dt : {mdlm::DType::f32, mdlm::DType::bf16}) {
      const char* only = getenv("DTYPE");
      if (only && std::string(only) != mdlm::dtype_name(dt)) continue;
      for (int s = 0; s < seeds; ++s) {
        Result r = run_case(c, dt, 1234 + 7919 * s);
        // The registry's tolerances (src/ops/attention.ts); NaN fails too.
        const bool bf = dt == mdlm::DType::bf16;
        const bool ok = r.fwd <= (bf ? 5e-3 : 2e-5) && r.bwd <= (bf ? 6e-3 : 1e-4) && r.bwd_det <= (bf ? 6e-3 : 1e-4);
        failed += !ok;
        std::printf("%-40s %-5s %12.3e %5s %12.3e %5s %12.3e %5s%s\n", c.label.c_str(), mdlm::dtype_name(dt), r.fwd, r.worst_fwd.c_str(), r.bwd,
                    r.worst_bwd.c_str(), r.bwd_det, r.worst_bwd_det.c_str(), ok ? "" : "  FAIL");
        std::fflush(stdout);
      }
    }
  }
  if (failed) std::printf("%d case(s) over tolerance\n", failed);
  return failed ? 1 : 0;
}
